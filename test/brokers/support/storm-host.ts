/**
 * One host of the broker storm, in its own process (killed with SIGKILL by the test): consumes a
 * JetStream stream through the host's inbox, and writes one effect row per consumer run.
 * Usage: node --import tsx storm-host.ts '{"db":"<url>","stream":"S","subject":"s.>","type":"s.order.paid","source":"orders"}'
 */
import { randomUUID } from 'node:crypto';
import { startHost } from '../../support/host-app.js';

const job = JSON.parse(process.argv[2] ?? '{}') as {
  db: string;
  stream: string;
  subject: string;
  type: string;
  source: string;
};

await startHost(
  job.db,
  {
    // One row per run, never deduplicated by the store itself: a second run would show.
    schemaSql: 'CREATE TABLE IF NOT EXISTS effects (run TEXT PRIMARY KEY, event_id TEXT NOT NULL)',
    config: {
      brokers: {
        [job.source]: {
          kind: 'nats',
          stream: job.stream,
          durable: 'storm',
          subject: job.subject,
          capacity: 64,
          ackWaitMs: 2_000,
        },
      },
      // A killed host's claimed events come back after this.
      events: { leaseMs: 2_000, baseDelayMs: 20 },
    },
    consumers: {
      [`${job.source}/${job.type}`]: {
        handle: async (event, ctx) =>
          void (await ctx.store.createIfAbsent('effects', { run: randomUUID(), event_id: event.id }, ['run'])),
      },
    },
  },
  { poolSize: 10 },
);
process.stdout.write('ready\n');
