/**
 * The shop's consumer order.paid killed with SIGKILL at every crash window of its execution
 * (oncely/testing's crashWindows): the webhook is delivered to a host in a child process that
 * drains its queue there and dies in the consumer; a fresh process gets the same delivery again.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type CrashReport, crashWindows, StormFailedError, storm } from 'oncely/testing';
import { beforeAll, describe, expect, it } from 'vitest';
import { APP, count, type Invoke, shopHost } from './client.js';
import type { Delivery } from './deliver.js';

process.env.ONCELY_DEMO = '1';
const WINDOWS = ['claimed', 'before-effect', 'after-effect', 'completed'] as const;

describe('the shop consumer order.paid killed at every crash window', () => {
  // No host in this process while the children write (a SQLite writer here would wait on their lock).
  const db = join(mkdtempSync(join(tmpdir(), 'oncely-shop-consumer-crash-')), 'shop.db');
  const orders = new Map<string, string>();
  const env = { ONCELY_DEMO: '1' };
  beforeAll(async () => {
    const host = await shopHost(db);
    await host.stop();
    // One order per window, made from a child process of its own (no crash variables there).
    for (const w of WINDOWS) {
      const call: Invoke = {
        db,
        handler: 'orders.create',
        key: `create-${w}`,
        body: { customerId: `cus_${w}`, sku: 'TEA-1', quantity: 1, phone: '+1 555' },
      };
      const made = await storm({
        run: () => undefined,
        sequential: 0,
        concurrent: 1,
        processes: 1,
        child: { module: join(APP, 'test', 'client.ts'), export: 'invoke', env, input: call },
        effects: () => 1,
      });
      const value = made.calls.find((c) => c.phase === 'process 1')?.value as { orderId?: string } | undefined;
      if (!value?.orderId) throw new Error(`no order made for window ${w}: ${made.table}`);
      orders.set(w, value.orderId);
    }
  }, 60_000);

  it('one ledger line, stock move and parcel per payment; the retry takes the event over once its lease ran out', async () => {
    const timestamp = Math.floor(Date.now() / 1000);
    const report = await crashWindows({
      name: 'consumer order.paid',
      child: { module: join(APP, 'test', 'deliver.ts'), export: 'deliver', env },
      // Sequential: a child drains every pending event, and must not crash in another window's.
      action: 'consume:shop/order.paid',
      input: (w): Delivery => ({
        db,
        id: `evt_paid_${w}`,
        timestamp,
        body: JSON.stringify({ type: 'order.paid', timestamp, data: { orderId: orders.get(w), version: 2 } }),
      }),
      effects: (w) =>
        count(db, "SELECT count(*) AS n FROM ledger WHERE order_id = ? AND kind = 'payment'", orders.get(w)),
    });
    console.log(report.table);
    // The consumer runs in the queue's transaction with the event's completion: a kill up to
    // 'after-effect' rolls back its rows and the engine's record together, and the fresh process's
    // queue claims the event again (attempt 2) after its 2 s lease. At 'completed' the kit kills
    // the process after the commit: the event is applied, and the retry's delivery is a duplicate.
    expect(Object.fromEntries(report.cases.map((c) => [c.window, c.got]))).toEqual({
      claimed: 'taken over',
      'before-effect': 'taken over',
      'after-effect': 'taken over',
      completed: 'replayed',
    });
    for (const c of report.cases) expect(c.retry.value).toEqual({ status: 'applied' });
    for (const id of orders.values()) {
      expect(count(db, 'SELECT count(*) AS n FROM stock_moves WHERE order_id = ?', id)).toBe(1);
      expect(count(db, 'SELECT count(*) AS n FROM parcels WHERE order_id = ?', id)).toBe(1);
      expect(count(db, "SELECT count(*) AS n FROM orders WHERE id = ? AND status = 'paid'", id)).toBe(1);
    }
    // Delivered again after all that: the event is applied, the consumer does not run again.
    const again = await crashWindows({
      name: 'order.paid delivered again',
      child: { module: join(APP, 'test', 'deliver.ts'), export: 'deliver', env },
      windows: ['claimed'],
      action: 'consume:shop/order.paid',
      input: () => ({
        db,
        id: 'evt_paid_claimed',
        timestamp,
        body: JSON.stringify({ type: 'order.paid', timestamp, data: { orderId: orders.get('claimed'), version: 2 } }),
      }),
      effects: () =>
        count(db, "SELECT count(*) AS n FROM ledger WHERE order_id = ? AND kind = 'payment'", orders.get('claimed')),
    }).catch((e: unknown) => e);
    // Nothing to crash in: a duplicate of an applied event never reaches the consumer's claim.
    expect(again).toBeInstanceOf(StormFailedError);
    expect((again as Error).message).toContain("never reached window 'claimed'");
    const [only] = (again as StormFailedError<CrashReport>).report.cases;
    expect(only).toMatchObject({ crashed: false, got: 'replayed', effects: 1 });
  }, 120_000);
});
