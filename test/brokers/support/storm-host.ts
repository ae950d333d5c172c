/**
 * One host of the broker storm, in its own process (killed with SIGKILL by the test): consumes a
 * JetStream stream and a RabbitMQ queue through the host's inbox, and writes one effect row per
 * consumer run.
 * Usage: node --import tsx storm-host.ts '{"db":"<url>","stream":"S","subject":"s.>","type":"s.order.paid","queue":"q","rabbitmq":"amqp://..."}'
 */
import { randomUUID } from 'node:crypto';
import type { ConsumerModule } from '../../../src/host/app.js';
import { startHost } from '../../support/host-app.js';

const job = JSON.parse(process.argv[2] ?? '{}') as {
  db: string;
  stream: string;
  subject: string;
  type: string;
  queue: string;
  rabbitmq: string;
};

// One row per run, never deduplicated by the store itself: a second run would show.
const effect: ConsumerModule = {
  handle: async (event, ctx) =>
    void (await ctx.store.createIfAbsent('effects', { run: randomUUID(), event_id: event.id }, ['run'])),
};

await startHost(
  job.db,
  {
    schemaSql: 'CREATE TABLE IF NOT EXISTS effects (run TEXT PRIMARY KEY, event_id TEXT NOT NULL)',
    config: {
      brokers: {
        jetstream: {
          kind: 'nats',
          stream: job.stream,
          durable: 'storm',
          subject: job.subject,
          capacity: 64,
          ackWait: '2s',
        },
        // The queue exists (declared by the test); its type property names the event type.
        rabbit: { kind: 'rabbitmq', url: job.rabbitmq, queue: job.queue, capacity: 64 },
      },
      // A killed host's claimed events come back after this.
      events: { lease: '2s', backoff: 20 },
    },
    consumers: { [`jetstream/${job.type}`]: effect, 'rabbit/order.paid': effect },
  },
  { poolSize: 10 },
);
process.stdout.write('ready\n');
