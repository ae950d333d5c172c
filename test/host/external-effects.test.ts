/**
 * Issue 18's proof of `effects: 'external'`, on SQLite and PostgreSQL, with a real downstream (a
 * gateway on node:http that charges once per key and counts every POST) and host processes killed
 * with SIGKILL at each window: after the charge and before the commit under 'retry' (the next
 * caller takes over with the same key: one charge) and under 'hold' (the record turns unknown,
 * callers get 409 OUTCOME_UNKNOWN, the reconciler settles it from the gateway); before the charge
 * (the next caller executes once); and on PostgreSQL concurrent duplicates across 3 host processes
 * (one execution per key).
 */
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { LeaseExpiredPolicy } from '../../src/core/record.js';
import { handlerAction } from '../../src/host/invoke.js';
import { type Gateway, startGateway } from '../engine/support/downstream.js';
import { hostTargets, type RunningHost, startHost } from '../support/host-app.js';
import { startWorker, type Worker } from '../support/spawn.js';
import { until } from '../support/wait.js';
import { type PayOptions, payApp } from './support/pay-app.js';

const PAY_HOST = fileURLToPath(new URL('./support/pay-host.ts', import.meta.url));
// Long enough that the survivor starts and asks within it on a loaded machine; the tests wait
// out only what is left of it (leaseRunOut).
const LEASE = 3_000;
const ACTION = handlerAction('pay.charge');

for (const { name, target: makeTarget, cleanup } of hostTargets()) {
  describe(`effects 'external' on ${name}, hosts killed with SIGKILL`, () => {
    let target: string;
    let gateway: Gateway;
    let hosts: RunningHost[] = [];
    const workers: Worker[] = [];

    beforeAll(async () => {
      target = makeTarget();
      gateway = await startGateway();
    });
    afterEach(async () => {
      for (const host of hosts) await host.stop();
      hosts = [];
    });
    afterAll(async () => {
      for (const worker of workers) worker.child.kill('SIGKILL');
      for (const host of hosts) await host.stop();
      await gateway.close();
      await cleanup();
    });

    const options = (onLeaseExpired: LeaseExpiredPolicy, extra: Partial<PayOptions> = {}): PayOptions => ({
      gateway: gateway.url,
      lease: LEASE,
      onLeaseExpired,
      ...extra,
    });

    /** A host process of the pay app; resolves with its base URL once it listens. */
    async function spawnHost(pay: PayOptions): Promise<{ worker: Worker; base: string }> {
      const worker = startWorker({ ...pay, target }, PAY_HOST);
      workers.push(worker);
      const { port } = JSON.parse(await worker.waitFor('{')) as { port: number };
      return { worker, base: `http://127.0.0.1:${port}` };
    }

    /**
     * The host in this process, which takes over after a kill; started after it, and stopped by
     * the next test: on SQLite a host's background writes beside a child's open transaction wait
     * on its lock with this process (the gateway's) event loop blocked.
     */
    async function survivor(onLeaseExpired: LeaseExpiredPolicy): Promise<RunningHost> {
      const host = await startHost(target, payApp(options(onLeaseExpired)));
      hosts.push(host);
      return host;
    }

    const post = (base: string, orderId: string) =>
      fetch(`${base}/v1/invoke/pay.charge`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': `${orderId}-charge` },
        body: JSON.stringify({ orderId, amount: 42 }),
      });

    /** Starts a host that stops at `window`, sends it one order, and kills it -9 there. */
    async function killedAt(window: 'before-charge' | 'after-charge', onLeaseExpired: LeaseExpiredPolicy) {
      const orderId = `ORD-${randomUUID().slice(0, 8)}`;
      const { worker, base } = await spawnHost(options(onLeaseExpired, { crashAt: window }));
      // Never answered: the process dies while the handler waits.
      void post(base, orderId).catch(() => undefined);
      await worker.waitFor(window === 'after-charge' ? 'charged' : 'claimed');
      worker.child.kill('SIGKILL');
      await worker.exited;
      return { orderId, key: `${orderId}-charge` };
    }

    const recordOf = (host: RunningHost, key: string) => host.host.once.get(ACTION, key);
    /** Resolves once the dead process's claim of `key` is past its lease, by the lease time it stored. */
    const leaseRunOut = async (host: RunningHost, key: string) => {
      const leaseUntil = (await recordOf(host, key))?.leaseUntil;
      if (leaseUntil == null) throw new Error(`no lease on ${key}`);
      await until(`the lease of ${key} run out`, () => Date.now() > leaseUntil + 50, undefined, {
        timeoutMs: LEASE + 5_000,
      });
    };
    const payments = (host: RunningHost, orderId: string) =>
      host.rows<{ charge_id: string }>('SELECT charge_id FROM payments WHERE order_id = ?', [orderId]);

    it("'retry': killed after the charge, before the commit: the claim survives, the next caller takes over with the same key, one charge", async () => {
      const { orderId, key } = await killedAt('after-charge', 'retry');
      const host = await survivor('retry');
      expect(gateway.posts(key)).toBe(1);
      // Committed first: the claim outlived its process, and nothing of the handler's transaction did.
      expect((await recordOf(host, key))?.state).toBe('in_progress');
      expect(await payments(host, orderId)).toEqual([]);
      const early = await host.invoke('pay.charge', { orderId, amount: 42 }, { 'idempotency-key': key });
      expect(early.status).toBe(409);
      expect((early.body.error as { code: string }).code).toBe('IN_PROGRESS');
      await leaseRunOut(host, key);
      const retried = await host.invoke('pay.charge', { orderId, amount: 42 }, { 'idempotency-key': key });
      expect(retried.status).toBe(200);
      const charged = gateway.charges.get(key);
      expect(retried.body.data).toEqual({ chargeId: charged?.id, amount: 42 });
      // The retry carried the same key: the gateway answered its first charge and made no second one.
      expect(gateway.posts(key)).toBe(2);
      expect([...gateway.charges.values()].filter((c) => c.key === key)).toHaveLength(1);
      expect(await payments(host, orderId)).toEqual([{ charge_id: charged?.id }]);
      const record = await recordOf(host, key);
      expect(record).toMatchObject({ state: 'succeeded', attempts: 2 });
      const replay = await host.invoke('pay.charge', { orderId, amount: 42 }, { 'idempotency-key': key });
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(gateway.posts(key)).toBe(2);
    });

    it("'hold': killed after the charge, before the commit: the record turns unknown, callers get 409 OUTCOME_UNKNOWN, the reconciler settles it", async () => {
      const { orderId, key } = await killedAt('after-charge', 'hold');
      const host = await survivor('hold');
      await leaseRunOut(host, key);
      for (let i = 0; i < 2; i++) {
        const refused = await host.invoke('pay.charge', { orderId, amount: 42 }, { 'idempotency-key': key });
        expect(refused.status).toBe(409);
        expect((refused.body.error as { code: string }).code).toBe('OUTCOME_UNKNOWN');
      }
      expect((await recordOf(host, key))?.state).toBe('unknown');
      expect(gateway.posts(key)).toBe(1);
      // The reconciler asks the gateway by the key and stores the charge it made.
      const report = await host.host.reconcile({ olderThan: 0 });
      expect(report.settled).toContainEqual({ ref: `default/${encodeURIComponent(ACTION)}/${key}`, answer: 'value' });
      expect((await recordOf(host, key))?.state).toBe('succeeded');
      const settled = await host.invoke('pay.charge', { orderId, amount: 42 }, { 'idempotency-key': key });
      expect(settled.status).toBe(200);
      expect(settled.body.data).toEqual({ chargeId: gateway.charges.get(key)?.id, amount: 42 });
      expect(gateway.posts(key)).toBe(1);
    });

    it('killed before the charge: the next caller executes once', async () => {
      const { orderId, key } = await killedAt('before-charge', 'retry');
      const host = await survivor('retry');
      expect(gateway.posts(key)).toBe(0);
      expect((await recordOf(host, key))?.state).toBe('in_progress');
      await leaseRunOut(host, key);
      const answer = await host.invoke('pay.charge', { orderId, amount: 42 }, { 'idempotency-key': key });
      expect(answer.body).toMatchObject({ code: 0 });
      expect(answer.status).toBe(200);
      expect(gateway.posts(key)).toBe(1);
      expect(await payments(host, orderId)).toHaveLength(1);
    });

    if (name === 'postgres')
      it('concurrent duplicates across 3 host processes: one execution per key', async () => {
        const bases = await Promise.all([0, 1, 2].map(() => spawnHost(options('retry', { holdMs: 150 }))));
        const orders = Array.from({ length: 4 }, () => `ORD-${randomUUID().slice(0, 8)}`);
        const answers = await Promise.all(
          orders.flatMap((orderId) =>
            bases.flatMap(({ base }) =>
              Array.from({ length: 4 }, async () => {
                const res = await post(base, orderId);
                return { orderId, status: res.status, replayed: res.headers.get('idempotent-replayed') === 'true' };
              }),
            ),
          ),
        );
        const host = await survivor('retry');
        for (const orderId of orders) {
          const key = `${orderId}-charge`;
          const mine = answers.filter((a) => a.orderId === orderId);
          expect(mine.every((a) => a.status === 200 || a.status === 409)).toBe(true);
          // One execution: one first answer, one POST to the gateway, one payment row.
          expect(mine.filter((a) => a.status === 200 && !a.replayed)).toHaveLength(1);
          expect(gateway.posts(key)).toBe(1);
          expect(await payments(host, orderId)).toHaveLength(1);
          expect((await recordOf(host, key))?.state).toBe('succeeded');
        }
      });
  });
}
