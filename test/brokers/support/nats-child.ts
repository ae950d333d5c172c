/**
 * A process the NATS tests kill with SIGKILL at one exact point, by killing itself there:
 * `inbox`: between the commit of a batch and its ack; `relay`: between the PubAck and the mark.
 * Usage: node --import tsx nats-child.ts '{"job":"inbox"|"relay","db":"<url>",...}'
 */

import { eventInbox } from '../../../src/brokers/inbox.js';
import { natsSource, natsTarget } from '../../../src/brokers/nats.js';
import { brokerRelay } from '../../../src/brokers/outbox.js';
import type { BrokerSource } from '../../../src/brokers/types.js';
import { openDb } from '../../../src/db/index.js';
import { EventQueue } from '../../../src/host/events.js';

const job = JSON.parse(process.argv[2] ?? '{}') as {
  job: 'inbox' | 'relay';
  db: string;
  stream: string;
  durable: string;
  source: string;
};
const die = () => process.kill(process.pid, 'SIGKILL');
// The relay's and the inbox's timers are unref'd (they never hold an app's process open), so an
// idle loop would let this process end before its first round: it lives until it is killed.
setInterval(() => {}, 60_000);
const db = await openDb(job.db);

if (job.job === 'inbox') {
  const events = new EventQueue(db, { consumerFor: () => undefined });
  await events.migrate();
  const real = natsSource({ name: job.source, stream: job.stream, durable: job.durable, ackWait: '1s' });
  // The batch committed (the inbox acks only after its commit): dies before any ack is sent.
  const source: BrokerSource = {
    name: real.name,
    start: (handle) =>
      real.start((batch) =>
        handle(
          batch.map((m) => ({
            ...m,
            ack: async () => {
              process.stdout.write('committed\n');
              die();
            },
          })),
        ),
      ),
    stop: () => real.stop(),
    status: () => real.status(),
  };
  await eventInbox(source, { db, events }).start();
  process.stdout.write('ready\n');
} else {
  const real = natsTarget();
  const relay = await brokerRelay(
    db,
    {
      deliver: async (message) => {
        await real.deliver(message);
        process.stdout.write('published\n');
        die();
      },
      close: () => real.close(),
      status: () => real.status(),
    },
    { lease: 200 },
  );
  relay.start();
  process.stdout.write('ready\n');
}
