/**
 * The brokers of the broker bench (bench/brokers.ts), each behind one shape: a fresh queue or
 * stream per run, preloading it, oncely's source and target on it, and the bare consumer and
 * publisher the floors use, on the same client library oncely's modules use.
 */
import { AckPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect as natsConnect } from '@nats-io/transport-node';
import amqp from 'amqplib';
import { Redis } from 'ioredis';
import { natsSource, natsTarget } from '../src/brokers/nats.js';
import { rabbitmqSource, rabbitmqTarget } from '../src/brokers/rabbitmq.js';
import { redisStreamsSource, redisStreamsTarget } from '../src/brokers/redis-streams.js';
import type { BrokerSource, BrokerTarget } from '../src/brokers/types.js';
import { REDIS_URL, runId } from './setup.js';

export const NATS_SERVERS = process.env.NATS_SERVERS ?? '127.0.0.1:4222';
export const RABBITMQ_URL = process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
/** Messages unacked at once, for oncely's sources and the bare consumers alike. */
export const CAPACITY = 64;

/** A bare publisher: one message, resolved after the broker's confirm. */
export interface BarePublisher {
  publish(id: string, topic: string, payload: string): Promise<void>;
  close(): Promise<void>;
}

export interface BenchBroker {
  name: string;
  /** A new queue or stream for one run. */
  fresh(): Promise<string>;
  /** Puts `ids` in it, each a message `{"n": i}` with its id where oncely's source reads it. */
  preload(channel: string, ids: string[]): Promise<void>;
  source(channel: string, name: string): BrokerSource;
  target(channel: string): BrokerTarget;
  /** Consumes `n` messages, each: `insert(id)`, then its ack; CAPACITY unacked at most. */
  bareConsume(channel: string, n: number, insert: (id: string) => Promise<unknown>): Promise<void>;
  barePublisher(channel: string): Promise<BarePublisher>;
  drop(channel: string): Promise<void>;
  close(): Promise<void>;
}

export async function rabbitmqBench(): Promise<BenchBroker> {
  const connection = await amqp.connect(RABBITMQ_URL);
  const admin = await connection.createConfirmChannel();
  return {
    name: 'rabbitmq',
    async fresh() {
      const queue = `oncely-bench-${runId()}`;
      await admin.assertQueue(queue, { durable: true });
      return queue;
    },
    async preload(queue, ids) {
      for (const [i, id] of ids.entries()) {
        if (!admin.sendToQueue(queue, Buffer.from(`{"n":${i}}`), { persistent: true, messageId: id, type: 'bench' }))
          await new Promise((resolve) => admin.once('drain', resolve));
      }
      await admin.waitForConfirms();
    },
    source: (queue, name) => rabbitmqSource({ name, url: RABBITMQ_URL, queue, capacity: CAPACITY }),
    target: (queue) => rabbitmqTarget({ url: RABBITMQ_URL, routingKey: queue }),
    async bareConsume(queue, n, insert) {
      const channel = await connection.createChannel();
      await channel.prefetch(CAPACITY);
      let done = 0;
      await new Promise<void>((resolve, reject) => {
        void channel.consume(queue, (message) => {
          if (!message) return;
          insert(String(message.properties.messageId)).then(() => {
            channel.ack(message);
            if (++done === n) resolve();
          }, reject);
        });
      });
      await channel.close();
    },
    async barePublisher() {
      const own = await amqp.connect(RABBITMQ_URL);
      const channel = await own.createConfirmChannel();
      return {
        publish: (id, topic, payload) =>
          new Promise<void>((resolve, reject) =>
            channel.publish(
              '',
              topic,
              Buffer.from(payload),
              { persistent: true, messageId: id, type: topic },
              (error) => (error ? reject(error) : resolve()),
            ),
          ),
        close: () => own.close(),
      };
    },
    async drop(queue) {
      await admin.deleteQueue(queue);
    },
    close: () => connection.close(),
  };
}

export async function redisBench(): Promise<BenchBroker> {
  const admin = new Redis(REDIS_URL);
  const group = 'bench';
  return {
    name: 'redis streams',
    async fresh() {
      const stream = `oncely-bench:${runId()}:stream`;
      await admin.xgroup('CREATE', stream, group, '0', 'MKSTREAM');
      return stream;
    },
    async preload(stream, ids) {
      for (let from = 0; from < ids.length; from += 500) {
        const pipeline = admin.pipeline();
        ids.slice(from, from + 500).forEach((id, k) => {
          pipeline.xadd(stream, '*', 'id', id, 'type', 'bench', 'data', `{"n":${from + k}}`);
        });
        await pipeline.exec();
      }
    },
    source: (stream, name) =>
      redisStreamsSource({ name, url: REDIS_URL, stream, group, consumer: 'oncely', capacity: CAPACITY, blockMs: 200 }),
    target: (stream) => redisStreamsTarget({ url: REDIS_URL, stream }),
    async bareConsume(stream, n, insert) {
      const reader = new Redis(REDIS_URL);
      let done = 0;
      const inFlight = new Set<Promise<void>>();
      while (done < n) {
        const room = CAPACITY - inFlight.size;
        if (room === 0) {
          await Promise.race(inFlight);
          continue;
        }
        const reply = (await reader.xreadgroup(
          'GROUP',
          group,
          'bare',
          'COUNT',
          room,
          'BLOCK',
          200,
          'STREAMS',
          stream,
          '>',
        )) as [string, [string, string[]][]][] | null;
        for (const [entry, fields] of reply?.[0]?.[1] ?? []) {
          const one: Promise<void> = insert(String(fields[fields.indexOf('id') + 1]))
            .then(() => admin.xack(stream, group, entry))
            .then(() => {
              done++;
              inFlight.delete(one);
            });
          inFlight.add(one);
        }
        if (!reply && inFlight.size > 0) await Promise.race(inFlight);
      }
      reader.disconnect();
    },
    async barePublisher(stream) {
      const own = new Redis(REDIS_URL);
      return {
        publish: async (id, topic, payload) => {
          await own.xadd(stream, '*', 'id', id, 'type', topic, 'data', payload);
        },
        close: async () => void own.disconnect(),
      };
    },
    async drop(stream) {
      await admin.del(stream);
    },
    close: async () => void admin.disconnect(),
  };
}

/** JetStream: a stream per run (`B_<tag>` capturing `b_<tag>.>`), named by its tag. */
export async function natsBench(): Promise<BenchBroker> {
  const nc = await natsConnect({ servers: NATS_SERVERS, name: 'oncely bench' });
  const jsm = await jetstreamManager(nc);
  const js = jetstream(nc);
  const subject = (tag: string) => `b_${tag}.bench`;
  return {
    name: 'nats jetstream',
    async fresh() {
      const tag = runId();
      await jsm.streams.add({ name: `B_${tag}`, subjects: [`b_${tag}.>`] });
      return tag;
    },
    async preload(tag, ids) {
      for (let from = 0; from < ids.length; from += 500)
        await Promise.all(
          ids.slice(from, from + 500).map((id, k) => js.publish(subject(tag), `{"n":${from + k}}`, { msgID: id })),
        );
    },
    source: (tag, name) =>
      natsSource({ name, servers: NATS_SERVERS, stream: `B_${tag}`, durable: 'oncely', capacity: CAPACITY }),
    target: (tag) => natsTarget({ servers: NATS_SERVERS, subject: () => subject(tag) }),
    async bareConsume(tag, n, insert) {
      await jsm.consumers.add(`B_${tag}`, {
        durable_name: 'bare',
        ack_policy: AckPolicy.Explicit,
        max_ack_pending: CAPACITY,
      });
      const consumer = await js.consumers.get(`B_${tag}`, 'bare');
      const messages = await consumer.consume({ max_messages: CAPACITY });
      let done = 0;
      await new Promise<void>((resolve, reject) => {
        void (async () => {
          for await (const message of messages) {
            insert(String(message.headers?.get('Nats-Msg-Id'))).then(() => {
              message.ack();
              if (++done === n) resolve();
            }, reject);
          }
        })();
      });
      await messages.close();
    },
    async barePublisher(tag) {
      return {
        publish: async (id, _topic, payload) => {
          await js.publish(subject(tag), payload, { msgID: id });
        },
        close: async () => {},
      };
    },
    async drop(tag) {
      await jsm.streams.delete(`B_${tag}`);
    },
    close: () => nc.close(),
  };
}
