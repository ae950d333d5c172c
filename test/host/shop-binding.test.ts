/**
 * The shop's "affected === 0 does not prove the job started" pattern, on SQLite and PostgreSQL:
 * orders.fulfil (effects 'external') moves a paid order to 'fulfilling' and starts its flow keyed
 * by the order. A host process killed with SIGKILL between the update and the flow's start, then
 * the retry on another host: one flow for the order, started once. An order whose move committed
 * without its flow (0 rows affected on the next call) still gets its flow, and only one.
 */
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { openDb } from '../../src/db/index.js';
import { handlerAction } from '../../src/host/invoke.js';
import { hostTargets, type RunningHost, sleep, startHost } from '../support/host-app.js';
import { startWorker, type Worker } from '../support/spawn.js';
import { bindingApp } from './support/shop-binding-app.js';

const HOST = fileURLToPath(new URL('./support/shop-binding-host.ts', import.meta.url));
const LEASE = 600;

for (const { name, target: makeTarget, cleanup } of hostTargets()) {
  describe(`orders.fulfil on ${name}: the order's state and its flow`, () => {
    let target: string;
    let hosts: RunningHost[] = [];
    const workers: Worker[] = [];

    beforeAll(() => {
      target = makeTarget();
    });
    afterEach(async () => {
      for (const host of hosts) await host.stop();
      hosts = [];
    });
    afterAll(async () => {
      for (const worker of workers) worker.child.kill('SIGKILL');
      await cleanup();
    });

    /** Writes an order in `status` on a connection of its own (committed before any host runs it). */
    async function seedOrder(status: string): Promise<string> {
      const orderId = `ord_${randomUUID().slice(0, 8)}`;
      const db = await openDb(target);
      try {
        await db.run(
          `INSERT INTO orders (id, customer_id, sku, quantity, amount_cents, phone, status) VALUES (?, 'cus_1', 'TEA-1', 1, 4200, '+86 138 0000 0000', ?)`,
          [orderId, status],
        );
      } finally {
        await db.close();
      }
      return orderId;
    }

    const fulfil = (host: RunningHost, orderId: string, key: string) =>
      host.invoke('orders.fulfil', { orderId }, { 'idempotency-key': key });
    const flowsOf = (host: RunningHost, orderId: string) =>
      host.rows<{ workflow_id: string; runs: number | string }>(
        `SELECT workflow_id, runs FROM oncely_flows WHERE name = 'order-fulfilment' AND input LIKE ?`,
        [`%${orderId}%`],
      );
    const statusOf = async (host: RunningHost, orderId: string) =>
      (await host.rows<{ status: string }>('SELECT status FROM orders WHERE id = ?', [orderId]))[0]?.status;

    it('killed -9 between the update and the flow start: the retry starts the one flow, never a second', async () => {
      // The child migrates the schema; the order is written after it listens, before it is called.
      const worker = startWorker({ lease: LEASE, crashAt: 'after-update', target }, HOST);
      workers.push(worker);
      const { port } = JSON.parse(await worker.waitFor('{')) as { port: number };
      const orderId = await seedOrder('paid');
      const key = `${orderId}-fulfil`;
      void fetch(`http://127.0.0.1:${port}/v1/invoke/orders.fulfil`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body: JSON.stringify({ orderId }),
      }).catch(() => undefined);
      await worker.waitFor('updated');
      worker.child.kill('SIGKILL');
      await worker.exited;

      const host = await startHost(target, bindingApp({ lease: LEASE }));
      hosts.push(host);
      // The claim outlived its process; the handler's transaction (the move with it) did not.
      expect((await host.host.once.get(handlerAction('orders.fulfil'), key))?.state).toBe('in_progress');
      expect(await flowsOf(host, orderId)).toEqual([]);
      // sleep: the dead process's lease runs out, which is what the takeover needs.
      await sleep(LEASE + 100);
      const retried = await fulfil(host, orderId, key);
      expect(retried.status).toBe(200);
      const data = retried.body.data as { workflowId: string; already: boolean };
      expect(data.already).toBe(false);
      expect(await statusOf(host, orderId)).toBe('fulfilling');
      // A second call under another key finds 0 rows to move, re-reads the order, and gets the same flow.
      const again = await fulfil(host, orderId, `${orderId}-fulfil-2`);
      expect(again.status).toBe(200);
      expect(again.body.data).toEqual({ orderId, workflowId: data.workflowId, already: true });
      const flows = await flowsOf(host, orderId);
      expect(flows.map((f) => f.workflow_id)).toEqual([data.workflowId]);
      expect((await host.host.once.get(handlerAction('orders.fulfil'), key))?.attempts).toBe(2);
    });

    it('a move that committed without its flow: 0 rows affected, the flow is started once all the same', async () => {
      const host = await startHost(target, bindingApp({ lease: LEASE }));
      hosts.push(host);
      // As a writer that died after its move left it: the order is fulfilling, and no flow exists.
      const orderId = await seedOrder('fulfilling');
      const first = await fulfil(host, orderId, `${orderId}-a`);
      expect(first.status).toBe(200);
      expect((first.body.data as { already: boolean }).already).toBe(false);
      const second = await fulfil(host, orderId, `${orderId}-b`);
      expect((second.body.data as { already: boolean }).already).toBe(true);
      expect(await flowsOf(host, orderId)).toHaveLength(1);
      // An order that was never paid is refused, and gets no flow.
      const unpaid = await seedOrder('created');
      const refused = await fulfil(host, unpaid, `${unpaid}-a`);
      expect(refused.status).toBe(500);
      expect(await flowsOf(host, unpaid)).toEqual([]);
      expect(await statusOf(host, unpaid)).toBe('created');
    });
  });
}
