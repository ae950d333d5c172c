/**
 * A charging process for the reconcile crash tests: wraps `charge` under `onLeaseExpired: 'hold'`
 * with a short lease and the gateway's reconcile, calls it once, and stops to be killed with
 * SIGKILL at one window: `before-charge` (prints "claimed", never calls the gateway) or
 * `after-charge` (prints "charged" once the gateway charged, before the outcome is stored).
 * Its job, as JSON in argv[2]: the store spec, key, lease (ms), gateway URL and window.
 */
import { createOncely } from '../../../src/index.js';
import { openStore, type StoreSpec } from '../../support/stores.js';
import { charge, reconcileCharge } from './downstream.js';

const job = JSON.parse(process.argv[2] ?? '{}') as {
  store: StoreSpec;
  orderId: string;
  lease: number;
  gateway: string;
  window: 'before-charge' | 'after-charge';
};
const once = await createOncely({ store: openStore(job.store), tenant: 'acme', metrics: false });
// A timer that keeps the process alive while it waits to be killed: SQLite leaves nothing else pending.
setInterval(() => {}, 60_000);
const pay = once.wrap(
  {
    action: 'charge',
    key: (input: { orderId: string; amount: number }) => [input.orderId, 'charge'],
    onLeaseExpired: 'hold',
    lease: job.lease,
    reconcile: reconcileCharge(job.gateway),
  },
  async (input, ctx) => {
    console.log('claimed');
    if (job.window === 'before-charge') await new Promise(() => {});
    const made = await charge(job.gateway, ctx.idempotencyKey, input.amount);
    console.log('charged');
    await new Promise(() => {});
    return made;
  },
);
await pay({ orderId: job.orderId, amount: 4_200 });
