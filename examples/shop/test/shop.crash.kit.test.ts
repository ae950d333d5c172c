/**
 * The shop's handlers killed with SIGKILL at every crash window (oncely/testing's crashWindows) and
 * retried from a fresh process, and the broken variants the kit must catch: a client that makes a
 * new key after a crash, a write made before the claim.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type CrashReport,
  crashWindows,
  type RecordingDownstream,
  recordingDownstream,
  StormFailedError,
  storm,
} from 'oncely/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { APP, count, type Invoke, shopHost } from './client.js';

const CLIENT = join(APP, 'test', 'client.ts');
process.env.ONCELY_DEMO = '1';

let gateway: RecordingDownstream;
beforeAll(async () => {
  gateway = await recordingDownstream();
});
afterAll(() => gateway.close());

/**
 * What the fresh process's retry got, per window. orders.create runs in one transaction with its
 * claim: a kill before the commit rolls both back, and the retry simply executes. payments.charge
 * (effects 'external') commits its claim first: after a kill the retry waits out the 2 s lease and
 * takes the claim over with the same key (attempt 2, read from the record). At 'completed' the kit
 * kills the host after the commit, before the answer leaves the process: the retry is replayed
 * (Idempotent-Replayed).
 */
const EXPECTED = {
  'orders.create': {
    claimed: 'executed',
    'before-effect': 'executed',
    'after-effect': 'executed',
    completed: 'replayed',
  },
  'payments.charge': {
    claimed: 'taken over',
    'before-effect': 'taken over',
    'after-effect': 'taken over',
    completed: 'replayed',
  },
};
const retries = (report: CrashReport) => Object.fromEntries(report.cases.map((c) => [c.window, c.got]));

const chargesAt = (orderId: string) =>
  gateway.effects.filter((e) => (e.body as { orderId?: string }).orderId === orderId).length;

describe('the shop killed at every crash window', () => {
  // No host in this process while the children write: a SQLite writer here would block the
  // gateway's event loop on the children's write lock.
  const db = join(mkdtempSync(join(tmpdir(), 'oncely-shop-crash-')), 'shop.db');
  beforeAll(async () => {
    const host = await shopHost(db);
    await host.stop();
  });
  const child = () => ({ module: CLIENT, export: 'invoke', env: { ONCELY_DEMO: '1', SHOP_GATEWAY_URL: gateway.url } });
  const create = (window: string): Invoke => ({
    db,
    handler: 'orders.create',
    key: `create-${window}`,
    body: { customerId: `cus_${window}`, sku: 'TEA-1', quantity: 1, phone: '+1 555' },
  });

  it('orders.create: the claim and the order commit together; the retry makes the one order or replays it', async () => {
    const report = await crashWindows({
      name: 'orders.create',
      child: child(),
      parallel: true,
      input: create,
      effects: (w) => count(db, 'SELECT count(*) AS n FROM orders WHERE customer_id = ?', `cus_${w}`),
    });
    console.log(report.table);
    expect(retries(report)).toEqual(EXPECTED['orders.create']);
  }, 60_000);

  it('payments.charge (effects external): one charge at the gateway per order, whichever window the host died in', async () => {
    const orders = new Map<string, string>();
    for (const w of ['claimed', 'before-effect', 'after-effect', 'completed']) {
      const made = await invokeOnce(create(`pay-${w}`));
      orders.set(w, made.orderId);
    }
    const report = await crashWindows({
      name: 'payments.charge',
      child: child(),
      action: 'POST payments.charge',
      parallel: true,
      input: (w) => ({ db, handler: 'payments.charge', key: `charge-${w}`, body: { orderId: orders.get(w) } }),
      effects: (w) => chargesAt(orders.get(w) as string),
    });
    console.log(report.table);
    expect(retries(report)).toEqual(EXPECTED['payments.charge']);
    for (const id of orders.values())
      expect(count(db, 'SELECT count(*) AS n FROM charges WHERE order_id = ?', id)).toBeLessThanOrEqual(1);
  }, 90_000);

  it('catches a charge whose client makes a new key after the crash: the second charge, named by its window', async () => {
    const { orderId } = await invokeOnce(create('random-charge'));
    const failure = await crashWindows({
      child: child(),
      windows: ['after-effect'],
      action: 'POST payments.charge',
      input: () => ({ db, handler: 'payments.charge', key: 'x', randomKey: true, body: { orderId } }),
      effects: () => chargesAt(orderId),
    }).catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(StormFailedError);
    expect((failure as Error).message).toContain("the crash at 'after-effect' produced a second effect (2");
  }, 60_000);

  it('catches a write made before the claim: the crash at the claim leaves it, the retry writes it again', async () => {
    const { orderId } = await invokeOnce(create('write-first'));
    const failure = await crashWindows({
      child: child(),
      windows: ['claimed'],
      action: 'POST payments.charge',
      input: () => ({ db, handler: 'payments.charge', key: 'charge-wf', writeFirst: { orderId }, body: { orderId } }),
      effects: () => count(db, 'SELECT count(*) AS n FROM charges WHERE order_id = ?', orderId),
    }).catch((e: unknown) => e);
    expect((failure as Error).message).toContain("the crash at 'claimed' produced a second effect");
  }, 60_000);

  /** Creates an order from a child process of its own (no host stays open here). */
  async function invokeOnce(call: Invoke): Promise<{ orderId: string }> {
    const report = await storm({
      run: () => undefined,
      sequential: 0,
      concurrent: 1,
      processes: 1,
      child: { ...child(), input: call },
      effects: () => 1,
    });
    return report.calls.find((c) => c.phase === 'process 1')?.value as { orderId: string };
  }
});
