/**
 * The shop tested with oncely/testing alone: every handler and consumer through a duplicate storm,
 * a lost response through the fault proxy, and a broken client the kit must catch (a random key per
 * attempt). The crash windows are in shop.crash.kit.test.ts.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Host } from 'oncely/host';
import { signStandardWebhook } from 'oncely/host';
import { faultProxy, type RecordingDownstream, recordingDownstream, StormFailedError, storm } from 'oncely/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { count, invoke, shopHost } from './client.js';

const SECRET = 'whsec_c2hvcC1leGFtcGxlLXdlYmhvb2stc2VjcmV0';
process.env.ONCELY_DEMO = '1';

let gateway: RecordingDownstream;
beforeAll(async () => {
  gateway = await recordingDownstream();
  process.env.SHOP_GATEWAY_URL = gateway.url;
});
afterAll(() => gateway.close());

const freshDb = () => join(mkdtempSync(join(tmpdir(), 'oncely-shop-kit-')), 'shop.db');
const chargesAt = (orderId: string) =>
  gateway.effects.filter((e) => (e.body as { orderId?: string }).orderId === orderId).length;

describe('the shop under duplicate storms', () => {
  const db = freshDb();
  let host: Host;
  let url: string;
  let orderId: string;
  beforeAll(async () => {
    host = await shopHost(db);
    url = `http://127.0.0.1:${await host.start(0)}`;
  });
  afterAll(() => host.stop());

  const call = (handler: string, key: string, body: unknown) => () => invoke({ db, handler, key, body });
  // One delivery of one event, repeated as a provider retries it: the same id, body and signature.
  const webhook = (type: string, id: string, data: object) => {
    const timestamp = Math.floor(Date.now() / 1000);
    const body = JSON.stringify({ type, timestamp, data });
    return () => deliver(id, timestamp, body);
  };
  const deliver = async (id: string, timestamp: number, body: string) => {
    const res = await host.http.request('/v1/webhooks/shop', {
      method: 'POST',
      body,
      headers: {
        'content-type': 'application/json',
        'webhook-id': id,
        'webhook-timestamp': String(timestamp),
        'webhook-signature': signStandardWebhook(SECRET, id, timestamp, body),
      },
    });
    if (res.status >= 300) throw Object.assign(new Error(await res.text()), { code: `HTTP_${res.status}` });
    return res.status;
  };
  const drained = async (sql: string, ...args: unknown[]) => {
    await host.events.drain();
    return count(db, sql, ...args);
  };

  it('orders.create: one order however often the client repeats its request', async () => {
    const report = await storm({
      name: 'orders.create',
      run: call('orders.create', 'create-1', { customerId: 'cus_storm', sku: 'TEA-1', quantity: 2, phone: '+1 555' }),
      effects: () => count(db, "SELECT count(*) AS n FROM orders WHERE customer_id = 'cus_storm'"),
    });
    console.log(report.table);
    orderId = String((report.calls.find((c) => c.ok)?.value as { orderId?: string } | undefined)?.orderId);
    // Every caller got the one order (a concurrent one may have been told IN_PROGRESS instead).
    expect(
      report.calls.every((c) =>
        c.ok ? (c.value as { orderId: string }).orderId === orderId : c.code === 'IN_PROGRESS',
      ),
    ).toBe(true);
    // The host says which answers were replays (Idempotent-Replayed): the 2 sequential repeats at least.
    expect(report.got.executed).toBe(1);
    expect(report.got.replayed).toBeGreaterThanOrEqual(2);
    expect((report.got.replayed ?? 0) + (report.got.IN_PROGRESS ?? 0)).toBe(12);
  });

  it('payments.charge: one charge at the gateway and one charges row', async () => {
    const report = await storm({
      name: 'payments.charge',
      run: call('payments.charge', 'charge-1', { orderId }),
      effects: () => chargesAt(orderId),
    });
    expect(report.got.executed).toBe(1);
    expect((report.got.replayed ?? 0) + (report.got.IN_PROGRESS ?? 0)).toBe(12);
    expect(count(db, 'SELECT count(*) AS n FROM charges WHERE order_id = ?', orderId)).toBe(1);
  });

  it('order.paid (a webhook delivered 13 times): one ledger line, one stock move, one SMS through the outbox', async () => {
    await storm({
      name: 'order.paid',
      run: webhook('order.paid', 'evt_paid_1', { orderId, version: 2 }),
      effects: () => drained("SELECT count(*) AS n FROM ledger WHERE order_id = ? AND kind = 'payment'", orderId),
    });
    expect(count(db, 'SELECT count(*) AS n FROM stock_moves WHERE order_id = ?', orderId)).toBe(1);
    // The outbox consumer sms.send: the relay delivers at least once, the consumer applies once.
    // Awaited with vitest's expect.poll: an example's tests use only what its users have.
    await expect
      .poll(() => count(db, 'SELECT count(*) AS n FROM sms_sent WHERE text LIKE ?', `%${orderId}%`), {
        timeout: 15_000,
        interval: 50,
      })
      .toBeGreaterThan(0);
    await host.events.drain();
    expect(count(db, 'SELECT count(*) AS n FROM sms_sent WHERE text LIKE ?', `%${orderId}%`)).toBe(1);
  });

  it('orders.fulfil: one fulfilment flow for the order', async () => {
    const report = await storm({
      name: 'orders.fulfil',
      run: call('orders.fulfil', 'fulfil-1', { orderId }),
      effects: () => count(db, 'SELECT count(*) AS n FROM oncely_flows WHERE biz_id LIKE ?', `%${orderId}%`),
    });
    expect(report.got.executed).toBe(1);
    expect((report.got.replayed ?? 0) + (report.got.IN_PROGRESS ?? 0)).toBe(12);
  });

  it('order.refunded: one refund line', async () => {
    await storm({
      name: 'order.refunded',
      run: webhook('order.refunded', 'evt_refund_1', { orderId, version: 3 }),
      effects: () => drained("SELECT count(*) AS n FROM ledger WHERE order_id = ? AND kind = 'refund'", orderId),
    });
  });

  it('a lost response through the fault proxy: the client retries and gets the first order', async () => {
    const proxy = await faultProxy({ target: url, plan: [{ nth: 1, fault: 'drop-response' }] });
    const post = () =>
      fetch(`${proxy.url}/v1/invoke/orders.create`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': 'create-lost', 'x-account': 'acme' },
        body: JSON.stringify({ customerId: 'cus_lost', sku: 'TEA-1', quantity: 1, phone: '+1 555' }),
      }).then((r) => r.json() as Promise<{ data: { orderId: string } }>);
    try {
      await expect(post()).rejects.toThrow();
      expect(proxy.requests[0]).toMatchObject({ fault: 'drop-response', upstreamStatus: 200 });
      const retry = await post();
      expect(retry.data.orderId).toMatch(/^ord_/);
      expect(count(db, "SELECT count(*) AS n FROM orders WHERE customer_id = 'cus_lost'")).toBe(1);
    } finally {
      await proxy.close();
    }
  });

  it('catches a client that makes a random key per attempt', async () => {
    const failure = await storm({
      name: 'orders.create with random keys',
      run: () =>
        invoke({
          db,
          handler: 'orders.create',
          key: 'unused',
          randomKey: true,
          body: { customerId: 'cus_random', sku: 'TEA-1', quantity: 1, phone: '+1 555' },
        }),
      effects: () => count(db, "SELECT count(*) AS n FROM orders WHERE customer_id = 'cus_random'"),
    }).catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(StormFailedError);
    expect((failure as Error).message).toContain('orders.create with random keys: 13 effects where 1 was expected');
  });
});
