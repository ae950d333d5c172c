/**
 * A holder process: claims one key, prints "claimed" from inside the function, and keeps running
 * (its lease renewed) until it is killed with SIGKILL. Its job, as JSON in argv[2]: the store spec,
 * action, key, lease (ms) and onLeaseExpired.
 */
import { createOncely } from '../../../src/index.js';
import { openStore, type StoreSpec } from '../../support/stores.js';

const job = JSON.parse(process.argv[2] ?? '{}') as {
  store: StoreSpec;
  action: string;
  key: string;
  lease: number;
  onLeaseExpired?: 'retry' | 'hold';
};
const once = await createOncely({ store: openStore(job.store), tenant: 'acme', metrics: false });
// A timer that keeps the process alive: a store without sockets (SQLite) leaves nothing else pending.
setInterval(() => {}, 60_000);
await once.run({ action: job.action, key: job.key, lease: job.lease, onLeaseExpired: job.onLeaseExpired }, async () => {
  console.log('claimed');
  await new Promise(() => {});
});
