/**
 * Issue 18's proof for consumers with `effects: 'external'`, on SQLite and PostgreSQL: a host
 * process consuming an event charges a real gateway under the event id and is killed with SIGKILL
 * after the charge, before the commit. Under 'retry' the next worker takes the event over with the
 * same key (one charge); under 'hold' the record turns unknown, the event waits (retried, not
 * applied) until the reconciler settles the record from the gateway, then applies without a
 * second charge.
 */
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { LeaseExpiredPolicy } from '../../src/core/record.js';
import { openDb } from '../../src/db/index.js';
import { consumerAction } from '../../src/host/consume.js';
import { EventQueue } from '../../src/host/events.js';
import { type Gateway, startGateway } from '../engine/support/downstream.js';
import { hostTargets, type RunningHost, sleep, startHost } from '../support/host-app.js';
import { startWorker, type Worker } from '../support/spawn.js';
import { until } from '../support/wait.js';
import { payApp } from './support/pay-app.js';

const PAY_HOST = fileURLToPath(new URL('./support/pay-host.ts', import.meta.url));
const LEASE = 600;
const ACTION = consumerAction('shop', 'order.paid');

for (const { name, target: makeTarget, cleanup } of hostTargets()) {
  describe(`consumers with effects 'external' on ${name}, killed with SIGKILL after the charge`, () => {
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
      await gateway.close();
      await cleanup();
    });

    /** A consuming host process that stops after the charge; an event for it; the kill. */
    async function killedAfterCharge(onLeaseExpired: LeaseExpiredPolicy) {
      const worker = startWorker(
        { gateway: gateway.url, lease: LEASE, onLeaseExpired, crashAt: 'after-charge', target },
        PAY_HOST,
      );
      workers.push(worker);
      await worker.waitFor('{');
      const eventId = `evt_${randomUUID().slice(0, 8)}`;
      const orderId = `ORD-${randomUUID().slice(0, 8)}`;
      const db = await openDb(target);
      await new EventQueue(db, { consumerFor: () => undefined }).intake('shop', eventId, 'order.paid', {
        orderId,
        amount: 42,
      });
      await db.close();
      await worker.waitFor('charged');
      worker.child.kill('SIGKILL');
      await worker.exited;
      const host = await startHost(target, payApp({ gateway: gateway.url, lease: LEASE, onLeaseExpired }));
      hosts.push(host);
      return { host, eventId, orderId };
    }

    const statusOf = async (host: RunningHost, eventId: string) =>
      (await host.rows<{ status: string }>('SELECT status FROM oncely_events WHERE event_id = ?', [eventId]))[0]
        ?.status;

    it("'retry': the next worker takes the event over with the same key; one charge, one row", async () => {
      const { host, eventId, orderId } = await killedAfterCharge('retry');
      expect(gateway.posts(eventId)).toBe(1);
      await until(
        'the event applied',
        () => statusOf(host, eventId),
        (status) => status === 'applied',
      );
      expect(gateway.posts(eventId)).toBe(2);
      expect([...gateway.charges.values()].filter((c) => c.key === eventId)).toHaveLength(1);
      expect(await host.rows('SELECT charge_id FROM payments WHERE order_id = ?', [orderId])).toEqual([
        { charge_id: gateway.charges.get(eventId)?.id },
      ]);
      expect((await host.host.once.get(ACTION, eventId))?.state).toBe('succeeded');
    });

    it("'hold': the record turns unknown, the event waits unapplied; settled by the reconciler, it applies with no second charge", async () => {
      const { host, eventId, orderId } = await killedAfterCharge('hold');
      await until(
        "the consumer's record unknown",
        async () => (await host.host.once.get(ACTION, eventId))?.state,
        (state) => state === 'unknown',
      );
      // sleep: a window in which the held event must not be applied.
      await sleep(300);
      expect(await statusOf(host, eventId)).not.toBe('applied');
      expect(await host.rows('SELECT charge_id FROM payments WHERE order_id = ?', [orderId])).toEqual([]);
      const report = await host.host.reconcile({ olderThan: 0 });
      expect(report.settled).toContainEqual({
        ref: `default/${encodeURIComponent(ACTION)}/${eventId}`,
        answer: 'value',
      });
      await until(
        'the event applied',
        () => statusOf(host, eventId),
        (status) => status === 'applied',
      );
      expect(gateway.posts(eventId)).toBe(1);
      // Replayed, not run: the consumer's own row was never written (the killed attempt's rolled back).
      expect(await host.rows('SELECT charge_id FROM payments WHERE order_id = ?', [orderId])).toEqual([]);
    });
  });
}
