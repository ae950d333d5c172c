import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { openDb } from '../../src/db/index.js';
import { EventQueue } from '../../src/host/events.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { startWorker, type Worker } from '../support/spawn.js';
import { until } from '../support/wait.js';
import { RABBITMQ_URL, rabbitAdmin, unique } from './support/brokers.js';
import { closeAdmin, freshStream } from './support/nats.js';

const HOST = fileURLToPath(new URL('./support/storm-host.ts', import.meta.url));
/** Ids per broker, each published 1 to 3 times. */
const MESSAGES = 2_000;
const HOSTS = 3;
const KILLS = 4;

/** Each id 1 to 3 times, the copies spread over the run in random order. */
function copies(prefix: string): string[] {
  const sends: string[] = [];
  for (let i = 0; i < MESSAGES; i++)
    for (let n = 1 + Math.floor(Math.random() * 3); n > 0; n--) sends.push(`${prefix}${i}`);
  for (let i = sends.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [sends[i], sends[j]] = [sends[j] as string, sends[i] as string];
  }
  return sends;
}

describe('the broker storm: 3 hosts on PostgreSQL consume one JetStream stream and one RabbitMQ queue, killed with SIGKILL at random and restarted', () => {
  const schema = freshSchema();
  afterAll(async () => {
    await closeAdmin();
    await dropSchema(schema);
  });

  it('runs every effect once, loses nothing and counts the duplicates', async () => {
    const url = `${POSTGRES_URL}?schema=${schema}`;
    // A window shorter than the gaps between copies: JetStream stores the copies, oncely dedupes them.
    const stream = await freshStream(100);
    const rabbit = await rabbitAdmin();
    const queue = unique('storm');
    await rabbit.queue(queue);
    const job = {
      db: url,
      stream: stream.stream,
      subject: stream.subject('in.>'),
      type: stream.subject('in.order.paid'),
      queue,
      rabbitmq: RABBITMQ_URL,
    };
    const hosts: Worker[] = [];
    const spawnHost = async (slot: number) => {
      hosts[slot] = startWorker(job, HOST);
      await hosts[slot].waitFor('ready');
    };
    const db = await openDb(url);
    try {
      // The first host migrates alone; the others start beside it.
      await spawnHost(0);
      await Promise.all([1, 2].map(spawnHost));

      const natsSends = copies('n');
      const rabbitSends = copies('r');
      let natsStored = 0;
      const publishing = (async () => {
        for (let i = 0; i < Math.max(natsSends.length, rabbitSends.length); i += 50) {
          const acks = await Promise.all(
            natsSends.slice(i, i + 50).map((id) => stream.publish('in.order.paid', { id }, id)),
          );
          natsStored += acks.filter((a) => !a.duplicate).length;
          for (const id of rabbitSends.slice(i, i + 50))
            rabbit.channel.sendToQueue(queue, Buffer.from(JSON.stringify({ id })), {
              persistent: true,
              messageId: id,
              type: 'order.paid',
            });
          await rabbit.channel.waitForConfirms();
          // sleep: spreads the publishing over the kills, so hosts die with messages in flight.
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
      })();
      let kills = 0;
      const killing = (async () => {
        for (let round = 0; round < KILLS; round++) {
          // sleep: a host lives a random while before it is killed; the spacing of the kills is the point.
          await new Promise((resolve) => setTimeout(resolve, 1_500 + Math.random() * 1_000));
          const slot = Math.floor(Math.random() * HOSTS);
          hosts[slot]?.child.kill('SIGKILL');
          await hosts[slot]?.exited;
          kills++;
          await spawnHost(slot);
        }
      })();
      await Promise.all([publishing, killing]);

      const counts = async () =>
        (
          await db.all<{ runs: number | string; ids: number | string }>(
            'SELECT COUNT(*) AS runs, COUNT(DISTINCT event_id) AS ids FROM effects',
          )
        )[0];
      let seen = '';
      const consumed = async () => {
        const c = await counts();
        seen = `effects ${c?.runs} runs of ${c?.ids} ids, jetstream ${JSON.stringify(await stream.consumer('storm'))}, queue ${await rabbit.count(queue)}`;
        return Number(c?.ids) === 2 * MESSAGES;
      };
      await until('every message consumed', consumed, undefined, { timeoutMs: 60_000 }).catch((error) => {
        throw new Error(`${error.message}: ${seen}`);
      });
      await until(
        'every message acked',
        async () => {
          const c = await stream.consumer('storm');
          return c.pending === 0 && c.ackPending === 0 && (await rabbit.count(queue)) === 0;
        },
        undefined,
        { timeoutMs: 30_000 },
      );
      const events = new EventQueue(db, { consumerFor: () => undefined });
      await events.drain(30_000);
      const final = await counts();
      expect([Number(final?.runs), Number(final?.ids)]).toEqual([2 * MESSAGES, 2 * MESSAGES]);
      const stats = await events.stats();
      expect([stats.accepted, stats.applied, stats.dead_lettered, stats.conflict]).toEqual([
        2 * MESSAGES,
        2 * MESSAGES,
        0,
        0,
      ]);
      // Every stored copy past the first was answered as a duplicate; a message committed by a host
      // killed before its ack came back once more, a duplicate too. RabbitMQ stores every copy.
      const copiesStored = natsStored + rabbitSends.length;
      expect(stats.duplicate).toBeGreaterThanOrEqual(copiesStored - 2 * MESSAGES);
      expect(natsStored).toBeGreaterThan(MESSAGES);
      expect(await rabbit.count(`${queue}.dead`)).toBe(0);
      expect(kills).toBe(KILLS);
      console.log(
        `storm: ${natsSends.length} JetStream publishes (${natsStored} stored) and ${rabbitSends.length} RabbitMQ publishes of ${MESSAGES} ids each, ${stats.duplicate} duplicates counted, ${kills} hosts killed`,
      );
    } finally {
      for (const host of hosts) host?.child.kill('SIGKILL');
      await Promise.all(hosts.map((h) => h?.exited));
      await stream.dispose();
      await rabbit.close();
      await db.close();
    }
  }, 150_000);
});
