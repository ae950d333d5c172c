/**
 * Messages the inbox cannot take, read in one batch with good ones, on each broker and database:
 * a NUL in the type or the id, a body over the source's cap, one the database refuses (a trigger
 * of the test's own). The good ones land, each bad one goes to the broker's dead-letter mechanism
 * once with one log line, and nothing spins. And a RabbitMQ redelivery after a transient failure
 * waits instead of coming back at once.
 */
import { jetstreamManager } from '@nats-io/jetstream';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { afterAll, describe, expect, it } from 'vitest';
import type { BrokerSourceConfig } from '../../src/brokers/config.js';
import { eventInbox } from '../../src/brokers/inbox.js';
import { rabbitmqSource } from '../../src/brokers/rabbitmq.js';
import { openDb } from '../../src/db/index.js';
import type { Db } from '../../src/db/types.js';
import { startHost } from '../support/host-app.js';
import { until } from '../support/wait.js';
import {
  DIALECTS,
  keptLogger,
  openQueue,
  RABBITMQ_URL,
  REDIS_URL,
  rabbitAdmin,
  redisAdmin,
  unique,
} from './support/brokers.js';
import { closeAdmin, freshStream, NATS } from './support/nats.js';

afterAll(() => closeAdmin());

const GOOD = 10;
const CAP = 1024;
const SCHEMA = 'CREATE TABLE IF NOT EXISTS effects (event_id TEXT PRIMARY KEY)';

interface Message {
  id: string;
  type: string;
  data: unknown;
}

/** Ten good messages and the four bad ones, each bad one with what its log line says. */
function batch(): { messages: Message[]; reasons: RegExp[] } {
  const messages: Message[] = [];
  for (let i = 1; i <= GOOD; i++) messages.push({ id: `good-${i}`, type: 'order.paid', data: { n: i } });
  messages.splice(3, 0, { id: 'bad-type', type: 'order.\u0000paid', data: { n: 0 } });
  messages.splice(6, 0, { id: 'bad\u0000id', type: 'order.paid', data: { n: 0 } });
  messages.splice(8, 0, { id: 'too-big', type: 'order.paid', data: { pad: 'x'.repeat(2 * CAP) } });
  messages.push({ id: 'poison', type: 'order.paid', data: { n: 0 } });
  return {
    messages,
    reasons: [
      /^the body is \d+ bytes, over the source's maxBodyBytes \(1024\)$/,
      /^the database refused it \(.*the test refuses poison/,
      /^the message id is not a valid key/,
      /^the message type is not a valid event type/,
    ],
  };
}

/** A broker set up for one test: the source's config, publishing, and what it dead-lettered. */
interface Broker {
  config: BrokerSourceConfig;
  publish(messages: Message[]): Promise<void>;
  deadLettered(): Promise<number>;
  /** Nothing is left unsettled on the broker (checked once the host stopped, or while it runs). */
  unsettled(): Promise<number>;
  dispose(): Promise<void>;
}

const BROKERS: Record<string, () => Promise<Broker>> = {
  nats: async () => {
    const stream = await freshStream();
    const nc: NatsConnection = await connect({ servers: NATS });
    const jsm = await jetstreamManager(nc);
    // JetStream's dead-letter path: one MSG_TERMINATED advisory per terminated message.
    let terminated = 0;
    const advisories = nc.subscribe(`$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.${stream.stream}.host`, {
      callback: () => void terminated++,
    });
    await nc.flush();
    return {
      config: { kind: 'nats', servers: NATS, stream: stream.stream, durable: 'host', type: { header: 'Event-Type' } },
      async publish(messages) {
        for (const m of messages) await stream.publish('in', m.data, m.id, { 'Event-Type': m.type });
      },
      deadLettered: async () => terminated,
      async unsettled() {
        const info = await jsm.consumers.info(stream.stream, 'host');
        return info.num_pending + info.num_ack_pending;
      },
      async dispose() {
        advisories.unsubscribe();
        await nc.close();
        await stream.dispose();
      },
    };
  },
  rabbitmq: async () => {
    const admin = await rabbitAdmin();
    const queue = unique('poison');
    await admin.queue(queue);
    return {
      config: { kind: 'rabbitmq', url: RABBITMQ_URL, queue },
      async publish(messages) {
        for (const m of messages) await admin.publish(queue, m.data, { messageId: m.id, type: m.type });
      },
      deadLettered: () => admin.count(`${queue}.dead`),
      // Ready messages: what is neither acked nor held (the host's stop requeues what it held).
      unsettled: () => admin.count(queue),
      dispose: () => admin.close(),
    };
  },
  'redis-streams': async () => {
    const admin = redisAdmin();
    const stream = unique('poison');
    admin.own(stream, `${stream}:dead`);
    return {
      config: { kind: 'redis-streams', url: REDIS_URL, stream, group: 'host' },
      async publish(messages) {
        for (const m of messages)
          await admin.redis.xadd(stream, '*', 'id', m.id, 'type', m.type, 'data', JSON.stringify(m.data));
      },
      deadLettered: () => admin.redis.xlen(`${stream}:dead`),
      async unsettled() {
        const [count] = (await admin.redis.xpending(stream, 'host')) as [number];
        return Number(count);
      },
      dispose: () => admin.close(),
    };
  },
};

/** The events tables made ahead of the host, with a trigger refusing the event id `poison` as a data error. */
async function refusingPoison(url: string): Promise<void> {
  const { db } = await openQueue(url);
  try {
    if (db.dialect === 'sqlite')
      await db.run(`CREATE TRIGGER refuse_poison BEFORE INSERT ON oncely_events WHEN NEW.event_id = 'poison'
        BEGIN SELECT RAISE(ABORT, 'the test refuses poison'); END`);
    else {
      await db.run(`CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.event_id = 'poison' THEN RAISE EXCEPTION 'the test refuses poison' USING ERRCODE = 'check_violation'; END IF;
          RETURN NEW;
        END $$`);
      await db.run(
        'CREATE TRIGGER refuse_poison BEFORE INSERT ON oncely_events FOR EACH ROW EXECUTE FUNCTION refuse_poison()',
      );
    }
  } finally {
    await db.close();
  }
}

for (const [dialect, makeDb] of Object.entries(DIALECTS))
  for (const [kind, makeBroker] of Object.entries(BROKERS))
    describe(`poison messages from ${kind} on ${dialect}`, () => {
      it('review3.4: the good messages of a batch land, each bad one is dead-lettered once with one log line, and nothing spins', async () => {
        const testDb = await makeDb();
        const broker = await makeBroker();
        await refusingPoison(testDb.url);
        const { logger, lines } = keptLogger();
        const source = `poison_${kind.replace('-', '_')}`;
        const { messages, reasons } = batch();
        // All in the broker before the host starts: they are read together, in one batch.
        await broker.publish(messages);
        const host = await startHost(testDb.url, {
          schemaSql: SCHEMA,
          config: {
            logger,
            brokers: { [source]: { ...broker.config, maxBodyBytes: CAP } as BrokerSourceConfig },
            events: { backoff: 5 },
          },
          consumers: {
            [`${source}/order.paid`]: {
              handle: async (event, ctx) =>
                void (await ctx.store.createIfAbsent('effects', { event_id: event.id }, ['event_id'])),
            },
          },
        });
        const effects = async () =>
          (await host.rows<{ event_id: string }>('SELECT event_id FROM effects ORDER BY event_id')).map(
            (r) => r.event_id,
          );
        const rejected = () => lines.filter((l) => l.message === 'broker message rejected');
        const notStored = () => lines.filter((l) => l.message === 'broker batch not stored');
        try {
          let seen = '';
          await until(
            'every good message applied and every bad one dead-lettered',
            async () => {
              const [applied, dead] = [(await effects()).length, await broker.deadLettered()];
              seen = `${applied} applied, ${dead} dead-lettered, ${rejected().length} rejected lines`;
              return applied === GOOD && dead === 4;
            },
            undefined,
            { timeoutMs: 30_000 },
          ).catch((error: Error) => {
            throw new Error(`${error.message} (last seen: ${seen})`);
          });
          // sleep: a window to see a spin: a batch held back would be taken, fail and log again within it.
          await new Promise((resolve) => setTimeout(resolve, 1_500));
          expect(await effects()).toEqual(Array.from({ length: GOOD }, (_, i) => `good-${i + 1}`).sort());
          expect(await broker.deadLettered()).toBe(4);
          expect(notStored()).toEqual([]);
          const why = rejected()
            .map((l) => String(l.fields.reason))
            .sort();
          expect(why).toHaveLength(4);
          for (const [i, reason] of reasons.entries()) expect(why[i]).toMatch(reason);
          expect(await broker.unsettled()).toBe(0);
          // Nothing stored of the bad ones: not the refused, not the rejected.
          const stored = await host.rows<{ n: number | string }>(
            "SELECT COUNT(*) AS n FROM oncely_events WHERE event_id NOT LIKE 'good-%'",
          );
          expect(Number(stored[0]?.n)).toBe(0);
        } finally {
          await host.stop();
          await broker.dispose();
          await testDb.dispose();
        }
      });
    });

for (const [dialect, makeDb] of Object.entries(DIALECTS))
  describe(`a RabbitMQ batch given back on ${dialect}`, () => {
    it('review3.4: waits before its redelivery, longer as failures go on, instead of coming back at once', async () => {
      const testDb = await makeDb();
      const admin = await rabbitAdmin();
      const queue = unique('transient');
      await admin.queue(queue);
      const { db, events } = await openQueue(testDb.url);
      const { logger, lines } = keptLogger();
      // The database fails every transaction, for a reason that is not the messages': no table.
      const away = async (on: Db, back: boolean) =>
        on.run(
          back
            ? 'ALTER TABLE oncely_events_away RENAME TO oncely_events'
            : 'ALTER TABLE oncely_events RENAME TO oncely_events_away',
        );
      const other = await openDb(testDb.url);
      await away(other, false);
      // One message: each redelivery is one batch and one line (several may come back in several batches).
      await admin.publish(queue, { n: 1 }, { messageId: 'm-1', type: 'order.paid' });
      const inbox = eventInbox(rabbitmqSource({ name: 'orders', url: RABBITMQ_URL, queue, retryDelay: 200 }), {
        db,
        events,
        logger,
      });
      const notStored = () => lines.filter((l) => l.message === 'broker batch not stored').length;
      try {
        await inbox.start();
        await until('the first failed batch', () => notStored() > 0);
        const window = 3_000;
        // sleep: the count of tries over this window is what is measured.
        await new Promise((resolve) => setTimeout(resolve, window));
        // Delays of 200, 400, 800, 1600 ms: five tries in three seconds at most (a requeue at once made hundreds).
        const tries = notStored();
        expect(tries).toBeGreaterThanOrEqual(2);
        expect(tries).toBeLessThanOrEqual(6);
        await away(other, true);
        await until(
          'the message stored once the database is back',
          async () => (await events.stats()).accepted === 1,
          undefined,
          { timeoutMs: 30_000 },
        );
        expect(lines.filter((l) => l.message === 'broker message rejected')).toEqual([]);
      } finally {
        await inbox.stop();
        await other.close();
        await db.close();
        await admin.close();
        await testDb.dispose();
      }
    });
  });
