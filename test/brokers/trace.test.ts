/**
 * Issue 30 item 13, the broker hops: a broker message's Oncely-Trace-Id (else its traceparent) is
 * stored with its event and its consumer runs under it; an outbox row sent to a broker target
 * carries its trace id as Oncely-Trace-Id, so a second host consuming that broker continues the
 * same trace. On NATS JetStream, RabbitMQ and Redis Streams, each host on SQLite and PostgreSQL.
 */
import { randomUUID } from 'node:crypto';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { afterAll, describe, expect, it } from 'vitest';
import type { BrokerSourceConfig, BrokerTargetConfig } from '../../src/brokers/config.js';
import type { ConsumerModule, HandlerModule } from '../../src/host/app.js';
import { type RunningHost, startHost } from '../support/host-app.js';
import { connectRedis } from '../support/redis.js';
import { until } from '../support/wait.js';
import { DIALECTS, RABBITMQ_URL, REDIS_URL, rabbitAdmin, type TestDb } from './support/brokers.js';
import { closeAdmin, freshStream, NATS } from './support/nats.js';

afterAll(() => closeAdmin());

const SCHEMA = 'CREATE TABLE IF NOT EXISTS traced (event_id TEXT PRIMARY KEY, trace_id TEXT NOT NULL)';

/** Notes the trace id it ran under, by event id. */
const note: ConsumerModule = {
  async handle(event, ctx) {
    const noted = await ctx.store.createIfAbsent('traced', { eventId: event.id, traceId: ctx.traceId }, ['eventId']);
    if (!noted.ok) throw new Error(noted.error.message);
  },
};

/** Enqueues `order.shipped` with the id it is given: its target is a broker. */
const ship: HandlerModule = {
  async handle(input, ctx) {
    const { orderId } = input as { orderId: string };
    await ctx.outbox.enqueue('order.shipped', { orderId }, { id: `shipped-${orderId}` });
    return { orderId };
  },
};

const TRACEPARENT_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const TRACEPARENT = `00-${TRACEPARENT_ID}-00f067aa0ba902b7-01`;
const OTHER_ID = '0af7651916cd43dd8448eb211c80319c';
const OTHER_TRACEPARENT = `00-${OTHER_ID}-b7ad6b7169203331-01`;

/** One broker as the tests drive it: where host A reads, where it writes, where host B reads that. */
interface Rig {
  /** Host A's source, and the event type its messages get. */
  inbound: BrokerSourceConfig;
  inboundType: string;
  /** Publishes a message to host A's source with these headers (or fields). */
  publish(id: string, data: unknown, headers: Record<string, string>): Promise<void>;
  /** Host A's outbox target of `order.shipped`. */
  target: BrokerTargetConfig;
  /** Host B's source over what the target wrote, and the event type it gives `order.shipped`. */
  outbound: BrokerSourceConfig;
  outboundType: string;
  /** The Oncely-Trace-Id the broker holds on the message of outbox row `id`, once it is there. */
  sentTrace(id: string): Promise<string | undefined>;
  dispose(): Promise<void>;
}

async function natsRig(): Promise<Rig> {
  const stream = await freshStream();
  const nc = await connect({ servers: NATS, name: 'oncely trace test' });
  const jsm = await jetstreamManager(nc);
  return {
    inbound: { kind: 'nats', servers: NATS, stream: stream.stream, durable: 'a', subject: stream.subject('in.>') },
    inboundType: stream.subject('in.order.paid'),
    publish: async (id, data, headers) => void (await stream.publish('in.order.paid', data, id, headers)),
    target: { kind: 'nats', servers: NATS, subject: (topic) => stream.subject(`out.${topic}`) },
    outbound: { kind: 'nats', servers: NATS, stream: stream.stream, durable: 'b', subject: stream.subject('out.>') },
    outboundType: stream.subject('out.order.shipped'),
    async sentTrace(id) {
      const stored = await jsm.streams.getMessage(stream.stream, {
        last_by_subj: stream.subject('out.order.shipped'),
      });
      if (stored?.header.get('Nats-Msg-Id') !== id) return undefined;
      return stored.header.get('Oncely-Trace-Id');
    },
    async dispose() {
      await stream.dispose();
      await nc.close();
    },
  };
}

async function rabbitRig(): Promise<Rig> {
  const admin = await rabbitAdmin();
  const tag = randomUUID().slice(0, 8);
  const [inQueue, outQueue, peekQueue, exchange] = ['in', 'out', 'peek', 'x'].map((n) => `oncely-trace-${tag}-${n}`);
  for (const queue of [inQueue, outQueue, peekQueue]) await admin.queue(queue as string);
  // A fanout: host B consumes one copy, the test reads the other.
  await admin.channel.assertExchange(exchange as string, 'fanout', { durable: false });
  await admin.channel.bindQueue(outQueue as string, exchange as string, '');
  await admin.channel.bindQueue(peekQueue as string, exchange as string, '');
  const seen = new Map<string, string | undefined>();
  return {
    inbound: { kind: 'rabbitmq', url: RABBITMQ_URL, queue: inQueue as string },
    inboundType: 'order.paid',
    publish: (id, data, headers) =>
      admin.publish(inQueue as string, data, { messageId: id, type: 'order.paid', headers }),
    target: { kind: 'rabbitmq', url: RABBITMQ_URL, exchange: exchange as string },
    outbound: { kind: 'rabbitmq', url: RABBITMQ_URL, queue: outQueue as string },
    outboundType: 'order.shipped',
    async sentTrace(id) {
      // A get takes the message off the peek queue: what it held is kept for the next call.
      const message = await admin.get(peekQueue as string);
      if (message) seen.set(String(message.properties.messageId), message.properties.headers?.['Oncely-Trace-Id']);
      return seen.get(id);
    },
    async dispose() {
      await admin.channel.deleteExchange(exchange as string).catch(() => {});
      await admin.close();
    },
  };
}

async function redisRig(): Promise<Rig> {
  const redis = await connectRedis();
  const tag = randomUUID().slice(0, 8);
  const [inStream, outStream] = [`oncely-trace:${tag}:in`, `oncely-trace:${tag}:out`];
  return {
    inbound: { kind: 'redis-streams', url: REDIS_URL, stream: inStream, group: 'a', block: 200 },
    inboundType: 'order.paid',
    async publish(id, data, headers) {
      const fields = { id, type: 'order.paid', data: JSON.stringify(data), ...headers };
      await redis.sendCommand(['XADD', inStream, '*', ...Object.entries(fields).flat()]);
    },
    target: { kind: 'redis-streams', url: REDIS_URL, stream: outStream },
    outbound: { kind: 'redis-streams', url: REDIS_URL, stream: outStream, group: 'b', block: 200 },
    outboundType: 'order.shipped',
    async sentTrace(id) {
      const entries = (await redis.sendCommand(['XRANGE', outStream, '-', '+'])) as [string, string[]][];
      for (const [, raw] of entries) {
        const fields = new Map<string, string>();
        for (let i = 0; i + 1 < raw.length; i += 2) fields.set(raw[i] as string, raw[i + 1] as string);
        if (fields.get('id') === id) return fields.get('Oncely-Trace-Id');
      }
      return undefined;
    },
    async dispose() {
      await redis.sendCommand(['DEL', inStream, outStream, `${inStream}:dead`]);
      await redis.quit();
    },
  };
}

const BROKERS = { nats: natsRig, rabbitmq: rabbitRig, 'redis-streams': redisRig };

/** The trace id the consumer of `eventId` ran under, once it ran. */
async function tracedBy(app: RunningHost, eventId: string): Promise<string> {
  const rows = await until(
    `the consumer of ${eventId} to note its trace id`,
    () => app.rows<{ trace_id: string }>('SELECT trace_id FROM traced WHERE event_id = ?', [eventId]),
    (found) => found.length > 0,
  );
  return (rows[0] as { trace_id: string }).trace_id;
}

/** The trace id on the event row and on the consumer's record of `eventId` of `source`. */
async function storedTraces(app: RunningHost, source: string, type: string, eventId: string) {
  const [event] = await app.rows<{ trace_id: string | null }>(
    'SELECT trace_id FROM oncely_events WHERE source = ? AND event_id = ?',
    [source, eventId],
  );
  const [record] = await app.rows<{ trace_id: string | null }>(
    'SELECT trace_id FROM oncely_records WHERE action = ? AND key = ?',
    [`consume:${source}/${type}`, eventId],
  );
  return { event: event?.trace_id, record: record?.trace_id };
}

for (const [broker, makeRig] of Object.entries(BROKERS)) {
  describe.each(Object.entries(DIALECTS))(`review3.13: ${broker} on %s: the trace id crosses the broker`, (_, make) => {
    const cleanups: (() => Promise<void>)[] = [];
    afterAll(async () => {
      for (const cleanup of cleanups.reverse()) await cleanup();
    });

    const host = async (db: TestDb, app: Parameters<typeof startHost>[1]) => {
      cleanups.push(() => db.dispose());
      const running = await startHost(db.url, { schemaSql: SCHEMA, ...app });
      cleanups.push(() => running.stop());
      return running;
    };

    it(`review3.13: a ${broker} message's Oncely-Trace-Id or traceparent is its consumer's trace id; an unusable one is ignored`, async () => {
      const rig = await makeRig();
      cleanups.push(() => rig.dispose());
      const source = `in_${randomUUID().slice(0, 8)}`;
      const app = await host(await make(), {
        config: { brokers: { [source]: rig.inbound }, events: { backoff: 5 } },
        consumers: { [`${source}/${rig.inboundType}`]: note },
      });
      const cases = [
        ['m-own', { 'Oncely-Trace-Id': 'intent-b13' }, 'intent-b13'],
        ['m-parent', { traceparent: TRACEPARENT }, TRACEPARENT_ID],
        // Oncely-Trace-Id names the intent; the traceparent only the sender's span.
        ['m-both', { 'Oncely-Trace-Id': 'intent-both', traceparent: TRACEPARENT }, 'intent-both'],
        // Unusable (a space): ignored, the traceparent still names the trace.
        ['m-bad-own', { 'Oncely-Trace-Id': 'not an id', traceparent: OTHER_TRACEPARENT }, OTHER_ID],
      ] as const;
      for (const [id, headers] of cases) await rig.publish(id, { id }, headers);
      await rig.publish('m-bad', { id: 'm-bad' }, { 'Oncely-Trace-Id': 'not an id', traceparent: 'garbage' });
      for (const [id, , expected] of cases) {
        expect(await tracedBy(app, id), id).toBe(expected);
        expect(await storedTraces(app, source, rig.inboundType, id), id).toEqual({ event: expected, record: expected });
      }
      // Nothing usable: taken all the same, under a trace id of its own, none stored with the event.
      const own = await tracedBy(app, 'm-bad');
      expect(own).not.toBe('not an id');
      expect(await storedTraces(app, source, rig.inboundType, 'm-bad')).toEqual({ event: null, record: own });
    });

    it(`review3.13: an outbox message to ${broker} carries the handler's trace id, and a second host consuming it runs under it`, async () => {
      const rig = await makeRig();
      cleanups.push(() => rig.dispose());
      const sender = await host(await make(), {
        config: { targets: { bus: rig.target }, outbox: { 'order.shipped': ['bus'] } },
        handlers: { 'orders.ship': ship },
      });
      const source = `relay_${randomUUID().slice(0, 8)}`;
      const receiver = await host(await make(), {
        config: { brokers: { [source]: rig.outbound }, events: { backoff: 5 } },
        consumers: { [`${source}/${rig.outboundType}`]: note },
      });
      for (const [orderId, headers, expected] of [
        ['ORD-1', { 'oncely-trace-id': 'intent-chain' }, 'intent-chain'],
        ['ORD-2', { traceparent: TRACEPARENT }, TRACEPARENT_ID],
      ] as const) {
        const shipped = await sender.invoke(
          'orders.ship',
          { orderId },
          { 'idempotency-key': `"${orderId}"`, ...headers },
        );
        expect(shipped.status, orderId).toBe(200);
        const id = `shipped-${orderId}`;
        expect(await until(`${id} on ${broker} with its trace id`, () => rig.sentTrace(id)), id).toBe(expected);
        expect(await tracedBy(receiver, id), id).toBe(expected);
        expect(await storedTraces(receiver, source, rig.outboundType, id), id).toEqual({
          event: expected,
          record: expected,
        });
      }
    });
  });
}
