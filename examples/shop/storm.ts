/**
 * Storms the shop: every request and webhook arrives three times (two at once, one after a lost
 * response), some refunds before their payments, one host is killed with SIGKILL mid-call to the
 * payment gateway (payments.charge, effects 'external') and one while its consumers run. Then counts
 * every effect, the gateway's charges per order among them. Run: `node --import tsx examples/shop/storm.ts [--db <target>] [--hosts 3]`
 * (needs `npm run build`: the hosts are the real `oncely serve`).
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { openDb } from 'oncely/db';
import { signStandardWebhook } from 'oncely/host';
import { startGateway } from './gateway.js';
import { type ServeProcess, startServeProcess } from './serve-process.js';

const APP = fileURLToPath(new URL('.', import.meta.url));
const SECRET = process.env.SHOP_WEBHOOK_SECRET ?? 'whsec_c2hvcC1leGFtcGxlLXdlYmhvb2stc2VjcmV0';

type HostProcess = ServeProcess;

/** What the storm found; `problems` lists every effect that happened twice or an event that was lost. */
export interface StormReport {
  orders: number;
  effects: Record<string, number>;
  outcomes: Record<string, number>;
  reclaimed: number;
  problems: string[];
}

function startHost(db: string, gateway: string): Promise<HostProcess> {
  // A local demo: without SHOP_WEBHOOK_SECRET the hosts use the shop's public demo secret, as SECRET does.
  return startServeProcess(APP, db, { ONCELY_DEMO: '1', ...process.env, SHOP_GATEWAY_URL: gateway });
}

async function post(url: string, path: string, body: string, headers: Record<string, string>) {
  const res = await fetch(`${url}${path}`, {
    method: 'POST',
    body,
    headers: { 'content-type': 'application/json', ...headers },
  });
  return { status: res.status, body: await res.text(), retryAfter: res.headers.get('retry-after') };
}

/**
 * One delivery as a well-behaved sender makes it: retried on another host when the connection
 * dies, and again after `Retry-After` when the key is running elsewhere (409 IN_PROGRESS).
 */
async function deliver(hosts: () => HostProcess[], pick: number, send: (host: HostProcess) => ReturnType<typeof post>) {
  for (let attempt = 0; ; attempt++) {
    const live = hosts();
    try {
      const reply = await send(live[(pick + attempt) % live.length] as HostProcess);
      if (reply.status !== 409 || reply.retryAfter === null || attempt >= 50) return reply;
      // Retry-After is in seconds; a storm waits a fraction of it so the run stays short.
      await new Promise((r) => setTimeout(r, 50));
    } catch (error) {
      if (attempt >= 20) throw error;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

/** Three deliveries: two at once (to two hosts), then one more after the first response is "lost". */
async function thrice(hosts: () => HostProcess[], send: (host: HostProcess) => ReturnType<typeof post>) {
  const first = await Promise.all([deliver(hosts, 0, send), deliver(hosts, hosts().length - 1, send)]);
  const last = await deliver(hosts, Math.floor(Math.random() * hosts().length), send);
  return [...first, last];
}

/** Runs the storm on `db` with `count` hosts; returns what it counted. */
export async function storm(
  db: string,
  count: number,
  orders = 20,
  print: (line: string) => void = () => {},
): Promise<StormReport> {
  const gateway = await startGateway();
  const startOne = () => startHost(db, gateway.url);
  let hosts = await Promise.all(Array.from({ length: count }, startOne));
  const database = await openDb(db);
  const live = () => hosts;
  const problems: string[] = [];
  print(`storm: ${count} host(s) on ${db.replace(/\/\/[^@]*@/, '//')}, ${orders} orders`);

  const ids: string[] = [];
  await Promise.all(
    Array.from({ length: orders }, async (_, i) => {
      const body = JSON.stringify({
        customerId: `cust-${i}`,
        sku: 'TEA-1',
        quantity: 1 + (i % 3),
        phone: `+86 138 0000 ${String(i).padStart(4, '0')}`,
      });
      const replies = await thrice(live, (h) =>
        post(h.url, '/v1/invoke/orders.create', body, { 'idempotency-key': `"create-${i}"` }),
      );
      // The same answer each time, but for each attempt's own request id.
      const bodies = new Set(replies.map((r) => r.body.replace(/,"requestId":"[^"]*"/, '')));
      if (bodies.size !== 1 || replies.some((r) => r.status !== 200))
        problems.push(`orders.create ${i} answered differently: ${[...bodies]}`);
      const created = JSON.parse(replies[0]?.body ?? '{}') as { data?: { orderId?: string } };
      ids[i] = created.data?.orderId ?? `missing-${i}`;
    }),
  );

  // Every order is charged at the gateway; the first host is killed while its charge of order 0 is
  // charged there but unanswered, and a replacement joins. The client retries with the same key until the lease lets
  // another host take over.
  const charge = (i: number) => (h: HostProcess) =>
    post(h.url, '/v1/invoke/payments.charge', JSON.stringify({ orderId: ids[i] }), {
      'idempotency-key': `"charge-${i}"`,
    });
  const held = gateway.holdFirst(ids[0] as string);
  const lost = charge(0)(hosts[0] as HostProcess).catch(() => undefined);
  await held;
  (hosts[0] as HostProcess).child.kill('SIGKILL');
  await lost;
  hosts = [...hosts.slice(1), await startOne()];
  print('storm: killed a host with SIGKILL mid-call to the gateway');
  for (const deadline = Date.now() + 15_000; ; ) {
    const reply = await deliver(live, 0, charge(0)).catch(() => undefined);
    if (reply?.status === 200) break;
    if (Date.now() > deadline) {
      problems.push(`payments.charge 0 not taken over after 15 s: ${reply?.status} ${reply?.body}`);
      break;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  await Promise.all(
    ids.map(async (_, i) => {
      const replies = await thrice(live, charge(i));
      const bodies = new Set(replies.map((r) => r.body.replace(/,"requestId":"[^"]*"/, '')));
      if (bodies.size !== 1 || replies.some((r) => r.status !== 200))
        problems.push(`payments.charge ${i} answered differently: ${[...bodies]}`);
    }),
  );

  const webhook = (type: string, eventId: string, data: object) => (h: HostProcess) => {
    const body = JSON.stringify({ type, timestamp: new Date().toISOString(), data });
    const timestamp = Math.floor(Date.now() / 1000);
    return post(h.url, '/v1/webhooks/shop', body, {
      'webhook-id': eventId,
      'webhook-timestamp': String(timestamp),
      'webhook-signature': signStandardWebhook(SECRET, eventId, timestamp, body),
    });
  };
  const refunded = new Set(ids.filter((_, i) => i % 4 === 0));
  const refundFirst = new Set(ids.filter((_, i) => i % 8 === 0));
  let killed = false;
  await Promise.all(
    ids.map(async (orderId, i) => {
      const paid = webhook('order.paid', `evt_paid_${orderId}`, { orderId, version: 2 });
      const refund = webhook('order.refunded', `evt_refund_${orderId}`, { orderId, version: 3 });
      if (refundFirst.has(orderId)) await thrice(live, refund);
      await thrice(live, paid);
      if (refunded.has(orderId) && !refundFirst.has(orderId)) await thrice(live, refund);
      if (i === Math.floor(orders / 2) && !killed) {
        // Mid-storm, the first host dies without a goodbye; its claimed events come back after the lease.
        killed = true;
        // Wait for a consumer in flight, so the kill lands mid-consumer rather than between events.
        for (let tries = 0; tries < 200; tries++) {
          const [busy] = await database.all<{ n: number | string }>(
            `SELECT COUNT(*) AS n FROM oncely_events WHERE status = 'processing'`,
          );
          if (Number(busy?.n) > 0) break;
          await new Promise((r) => setTimeout(r, 5));
        }
        const victim = hosts[0] as HostProcess;
        victim.child.kill('SIGKILL');
        hosts = hosts.length > 1 ? hosts.slice(1) : [await startOne()];
        print('storm: killed a host with SIGKILL mid-consumer');
      }
    }),
  );

  try {
    const deadline = Date.now() + 60_000;
    for (;;) {
      const [busy] = await database.all<{ n: number | string }>(
        `SELECT (SELECT COUNT(*) FROM oncely_events WHERE status IN ('pending', 'processing'))
              + (SELECT COUNT(*) FROM oncely_outbox WHERE status <> 'delivered') AS n`,
      );
      if (Number(busy?.n) === 0) break;
      if (Date.now() > deadline) {
        problems.push('events still pending after 60 s');
        break;
      }
      await new Promise((r) => setTimeout(r, 200));
    }
    const count = async (sql: string, params: unknown[] = []) =>
      Number((await database.all<{ n: number | string }>(sql, params))[0]?.n ?? 0);
    const effects: Record<string, number> = {};
    for (const [i, orderId] of ids.entries()) {
      const perOrder = {
        stock: await count('SELECT COUNT(*) AS n FROM stock_moves WHERE order_id = ?', [orderId]),
        payment: await count(`SELECT COUNT(*) AS n FROM ledger WHERE order_id = ? AND kind = 'payment'`, [orderId]),
        shipped: await count(`SELECT COUNT(*) AS n FROM parcels WHERE order_id = ? AND status = 'ready_to_ship'`, [
          orderId,
        ]),
        sms: await count('SELECT COUNT(*) AS n FROM sms_sent WHERE text LIKE ?', [`%${orderId} %`]),
        refund: await count(`SELECT COUNT(*) AS n FROM ledger WHERE order_id = ? AND kind = 'refund'`, [orderId]),
        charge: gateway.chargesOf(orderId).length,
        'charge row': await count('SELECT COUNT(*) AS n FROM charges WHERE order_id = ?', [orderId]),
        cancelled: await count(`SELECT COUNT(*) AS n FROM parcels WHERE order_id = ? AND status = 'cancelled'`, [
          orderId,
        ]),
      };
      for (const [effect, n] of Object.entries(perOrder)) {
        effects[`${effect} max per order`] = Math.max(effects[`${effect} max per order`] ?? 0, n);
        effects[`${effect} total`] = (effects[`${effect} total`] ?? 0) + n;
        if (n > 1) problems.push(`order ${i} (${orderId}): ${effect} happened ${n} times`);
      }
      // A payment applies whole or not at all (stale after its refund): never half.
      const payment = [perOrder.stock, perOrder.payment, perOrder.shipped, perOrder.sms];
      if (new Set(payment).size !== 1) problems.push(`order ${orderId}: payment effects disagree ${payment}`);
      // A refunded order's payment may be stale: its refund was applied first (sent first, or its payment's host died).
      if (!refunded.has(orderId) && perOrder.payment !== 1) problems.push(`order ${orderId}: payment not applied`);
      const wantRefund = refunded.has(orderId) ? 1 : 0;
      if (perOrder.charge !== 1 || perOrder['charge row'] !== 1) problems.push(`order ${orderId}: not charged once`);
      if (perOrder.refund !== wantRefund || perOrder.cancelled !== wantRefund)
        problems.push(`order ${orderId}: refund effects wrong`);
    }
    const outcomes: Record<string, number> = {};
    for (const row of await database.all<{ status: string; n: number | string }>(
      'SELECT status, COUNT(*) AS n FROM oncely_events GROUP BY status',
    ))
      outcomes[row.status] = Number(row.n);
    const expectedEvents = ids.length + refunded.size + (effects['sms total'] ?? 0);
    const total = Object.values(outcomes).reduce((a, b) => a + b, 0);
    if (total !== expectedEvents)
      problems.push(`events stored ${total}, expected ${expectedEvents} (no loss, no duplicate)`);
    if ((outcomes.dead ?? 0) > 0) problems.push(`${outcomes.dead} event(s) dead-lettered`);
    const reclaimed =
      (await count('SELECT COUNT(*) AS n FROM oncely_events WHERE attempts > 1')) +
      (await count('SELECT COUNT(*) AS n FROM oncely_outbox WHERE attempts > 1'));
    print(`storm: effects ${JSON.stringify(effects)}`);
    // Posted by the killed host and again by the one that took over: the same key, so one charge.
    if (gateway.posts('charge-0') < 2) problems.push('the charge killed mid-call was not taken over with its key');
    print(`storm: gateway posts of the charge killed mid-call: ${gateway.posts('charge-0')}`);
    print(`storm: event outcomes ${JSON.stringify(outcomes)}, retried or reclaimed: ${reclaimed}`);
    print(
      problems.length === 0
        ? 'storm: every effect happened at most once, no event lost'
        : `storm: PROBLEMS\n${problems.join('\n')}`,
    );
    return { orders: ids.length, effects, outcomes, reclaimed, problems };
  } finally {
    await database.close();
    for (const host of hosts) host.child.kill('SIGTERM');
    await gateway.close();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const arg = (name: string) => process.argv[process.argv.indexOf(name) + 1];
  const db = process.argv.includes('--db')
    ? (arg('--db') as string)
    : join(mkdtempSync(join(tmpdir(), 'oncely-storm-')), 'shop.db');
  const hosts = process.argv.includes('--hosts') ? Number(arg('--hosts')) : 1;
  const report = await storm(db, hosts, 20, console.log);
  process.exitCode = report.problems.length === 0 ? 0 : 1;
}
