/**
 * A process the RabbitMQ and Redis Streams crash tests kill with SIGKILL at one window:
 * - inbox: consumes through the real source and `eventInbox`; each message's ack prints
 *   `committed <id>` (the inbox acks only after its commit) and never sends, so the kill lands
 *   between commit and ack.
 * - relay: runs the outbox relay on the real target; each delivery prints `published <id>` once
 *   the broker confirmed it and never returns, so the kill lands between publish and mark.
 */
import { eventInbox } from '../../../src/brokers/inbox.js';
import { type RabbitSourceOptions, rabbitmqSource, rabbitmqTarget } from '../../../src/brokers/rabbitmq.js';
import {
  type RedisStreamsSourceOptions,
  redisStreamsSource,
  redisStreamsTarget,
} from '../../../src/brokers/redis-streams.js';
import type { BrokerSource, BrokerTarget } from '../../../src/brokers/types.js';
import { OutboxRelay } from '../../../src/host/outbox.js';
import { openQueue } from './brokers.js';

type Job =
  | { mode: 'inbox'; db: string; rabbitmq: RabbitSourceOptions }
  | { mode: 'inbox'; db: string; redis: RedisStreamsSourceOptions }
  | { mode: 'relay'; db: string; rabbitmq: { url: string }; leaseMs: number }
  | { mode: 'relay'; db: string; redis: { url: string; stream: string }; leaseMs: number };

const job = JSON.parse(process.argv[2] ?? '{}') as Job;
const never = new Promise<void>(() => {});
// The relay's and the inbox's timers are unref'd (they never hold an app's process open), so an
// idle loop would let this process end before its first round: it lives until it is killed.
setInterval(() => {}, 60_000);
const { db, events } = await openQueue(job.db);

if (job.mode === 'inbox') {
  const inner: BrokerSource = 'rabbitmq' in job ? rabbitmqSource(job.rabbitmq) : redisStreamsSource(job.redis);
  const source: BrokerSource = {
    name: inner.name,
    start: (handle) =>
      inner.start((batch) =>
        handle(
          batch.map((message) => ({
            ...message,
            ack: () => {
              console.log(`committed ${message.id}`);
              return never;
            },
          })),
        ),
      ),
    stop: () => inner.stop(),
    status: () => inner.status(),
  };
  await eventInbox(source, { db, events }).start();
} else {
  const inner: BrokerTarget = 'rabbitmq' in job ? rabbitmqTarget(job.rabbitmq) : redisStreamsTarget(job.redis);
  const target = {
    deliver: async (message: Parameters<BrokerTarget['deliver']>[0]) => {
      await inner.deliver(message);
      console.log(`published ${message.id}`);
      return never;
    },
  };
  new OutboxRelay(db, { target, lease: job.leaseMs, poll: 20 }).start();
}
console.log('ready');
