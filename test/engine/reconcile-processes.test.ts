/**
 * Issue 15's proof of reconciliation, across processes with kill -9, on SQLite, PostgreSQL,
 * Redis and MySQL: a real gateway (node:http, charging once per key) and a charging process under
 * `onLeaseExpired: 'hold'` killed at one window. Killed after the gateway charged, before the
 * outcome was stored: this process's reconcile asks the gateway by the key and settles the record
 * as succeeded with the gateway's charge; a duplicate replays it and the gateway charged once.
 * Killed before the charge: the gateway has none, reconcile answers 'retry', and the next call
 * charges exactly once.
 */
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Metrics } from '../../src/core/metrics.js';
import { createOncely, type Oncely } from '../../src/index.js';
import { startWorker } from '../support/spawn.js';
import { storeTargets } from '../support/store-targets.js';
import { openStore, type StoreSpec } from '../support/stores.js';
import { charge, type Gateway, reconcileCharge, startGateway } from './support/downstream.js';

const CHARGER = fileURLToPath(new URL('./support/charger.ts', import.meta.url));
const LEASE = 500;
// sleep: the helper for the one wait whose duration is the point, a dead holder's lease running out.
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function describeCrashes(name: string, makeSpec: () => StoreSpec, cleanup: () => Promise<void>) {
  describe(`reconcile after kill -9 on ${name}`, () => {
    let spec: StoreSpec;
    let gateway: Gateway;
    let once: Oncely;
    const metrics = new Metrics();
    // The same action as the killed process, with the same reconcile: this process settles its record.
    let pay: (input: { orderId: string; amount: number }) => Promise<{ value: unknown; replayed: boolean }>;

    beforeAll(async () => {
      spec = makeSpec();
      gateway = await startGateway();
      once = await createOncely({ store: openStore(spec), tenant: 'acme', metrics });
      pay = once.wrap(
        {
          action: 'charge',
          key: (input: { orderId: string; amount: number }) => [input.orderId, 'charge'],
          onLeaseExpired: 'hold',
          lease: LEASE,
          reconcile: reconcileCharge(gateway.url),
        },
        (input, ctx) => charge(gateway.url, ctx.idempotencyKey, input.amount),
      );
    });
    afterAll(async () => {
      await once.close();
      await gateway.close();
      await cleanup();
    });

    /** Starts a charger for a new order, kills it -9 at `window`, and waits for its lease to run out. */
    async function killedAt(window: 'before-charge' | 'after-charge') {
      const orderId = `ORD-${randomUUID().slice(0, 8)}`;
      const key = `${orderId}:charge`;
      const worker = startWorker({ store: spec, orderId, lease: LEASE, gateway: gateway.url, window }, CHARGER);
      await worker.waitFor(window === 'after-charge' ? 'charged' : 'claimed');
      // While its lease lasts (renewed while the holder lives) the claim is live: nobody asks about it. Asked
      // before the kill, as a loaded machine may take longer than the lease between the kill and the next call.
      expect((await once.reconcile({ olderThan: 0, action: 'charge' })).settled).toEqual([]);
      worker.child.kill('SIGKILL');
      expect((await worker.exited).signal).toBe('SIGKILL');
      // sleep: the dead holder's lease must run out before reconcile may ask about its claim.
      await sleep(LEASE + 150);
      return { orderId, key };
    }

    it('killed after the charge: reconcile settles the stalled record with the charge; a duplicate replays it, one charge', async () => {
      const { orderId, key } = await killedAt('after-charge');
      expect(gateway.posts(key)).toBe(1);
      expect(await once.get('charge', key)).toMatchObject({ state: 'in_progress' });
      const report = await once.reconcile({ olderThan: 0, action: 'charge' });
      expect(report.settled).toEqual([{ ref: `acme/charge/${encodeURIComponent(key)}`, answer: 'value' }]);
      const made = gateway.charges.get(key);
      expect(made).toMatchObject({ key, amount: 4_200 });
      const record = await once.get('charge', key);
      expect(record).toMatchObject({ state: 'succeeded', settlement: { by: 'reconciler', answer: 'value' } });
      const again = await pay({ orderId, amount: 4_200 });
      expect(again.replayed).toBe(true);
      expect(again.value).toEqual({ chargeId: made?.id, amount: 4_200 });
      expect(gateway.posts(key)).toBe(1);
      expect(metrics.value('oncely_reconciled_total', ['charge', 'value', 'reconciler'])).toBe(1);
    });

    it("killed before the charge: the caller gets OUTCOME_UNKNOWN, reconcile answers 'retry', the next call charges once", async () => {
      const { orderId, key } = await killedAt('before-charge');
      // Under 'hold' the first caller after the lease turns the record unknown instead of charging.
      await expect(pay({ orderId, amount: 4_200 })).rejects.toMatchObject({ code: 'OUTCOME_UNKNOWN' });
      expect(await once.get('charge', key)).toMatchObject({ state: 'unknown' });
      expect(gateway.posts(key)).toBe(0);
      const report = await once.reconcile({ olderThan: 0, action: 'charge' });
      expect(report.settled).toEqual([{ ref: `acme/charge/${encodeURIComponent(key)}`, answer: 'retry' }]);
      expect(await once.get('charge', key)).toMatchObject({
        state: 'released',
        settlement: { by: 'reconciler', answer: 'retry' },
      });
      const first = await pay({ orderId, amount: 4_200 });
      expect(first.replayed).toBe(false);
      const second = await pay({ orderId, amount: 4_200 });
      expect(second).toMatchObject({ replayed: true, value: first.value });
      expect(gateway.posts(key)).toBe(1);
      expect(gateway.charges.get(key)).toMatchObject({ amount: 4_200 });
    });
  });
}

for (const { title, spec, cleanup } of storeTargets(['sqlite', 'postgres', 'redis', 'mysql'], 'reconcile-kill'))
  describeCrashes(title, spec, cleanup);
