import { rmSync } from 'node:fs';
import { sleep } from '../core/backoff.js';
import { loadSqliteDriver } from '../db/sqlite.js';
import { createOncely } from '../engine/engine.js';
import { sqliteStore } from '../sqlite/index.js';

/** The "order paid" event of a shop, as its payment provider delivers it. */
interface OrderPaid {
  eventId: string;
  orderId: string;
  phone: string;
  amountCents: number;
}

/** What the demo printed, so tests can check the story and not only the text. */
export interface DemoReport {
  deliveries: { label: string; replayed: boolean }[];
  smsSent: number;
  ledgerLines: number;
}

/**
 * The story of seed 000: one "order paid" webhook delivered three times (twice at once, once more
 * after the sender lost the response) to a handler that sends an SMS and writes a ledger line.
 */
export async function runDemo(path: string, print: (line: string) => void): Promise<DemoReport> {
  // `npm i oncely` brings no SQLite driver; `oncely init` installs it, as it does for `oncely serve`.
  const Database = await loadSqliteDriver('oncely demo');
  for (const suffix of ['', '-wal', '-shm']) rmSync(`${path}${suffix}`, { force: true });
  const once = await createOncely({
    store: sqliteStore({ path }),
    tenant: 'shop',
    defaults: { ttl: '24h', lease: '30s' },
  });
  // The SMS gateway and the ledger are tables in the same file, standing in for the real side effects.
  const db = new Database(path);
  db.exec(`CREATE TABLE sms_sent (id INTEGER PRIMARY KEY, phone TEXT, text TEXT, idempotency_key TEXT);
           CREATE TABLE ledger (id INTEGER PRIMARY KEY, order_id TEXT, amount_cents INTEGER)`);

  const onOrderPaid = once.wrap(
    { action: 'order.paid', key: (e: OrderPaid) => [e.orderId, 'paid'], wait: '10s' },
    async (event, ctx) => {
      await sleep(150); // the SMS gateway is slow
      const sms = db
        .prepare('INSERT INTO sms_sent (phone, text, idempotency_key) VALUES (?, ?, ?)')
        .run(event.phone, `Order ${event.orderId} is paid`, ctx.idempotencyKey);
      const line = db
        .prepare('INSERT INTO ledger (order_id, amount_cents) VALUES (?, ?)')
        .run(event.orderId, event.amountCents);
      return { smsId: Number(sms.lastInsertRowid), ledgerLine: Number(line.lastInsertRowid) };
    },
  );

  const event: OrderPaid = { eventId: 'evt_1', orderId: 'ORD-10086', phone: '+86 138 0000 0000', amountCents: 4200 };
  print(`oncely demo: the "order paid" webhook for ${event.orderId} arrives three times (SQLite at ${path})`);
  const deliveries: DemoReport['deliveries'] = [];
  const report = (label: string, r: Awaited<ReturnType<typeof onOrderPaid>>) => {
    deliveries.push({ label, replayed: r.replayed });
    const what = r.replayed ? 'replayed' : 'executed';
    print(
      `  ${label.padEnd(46)} ${what.padEnd(9)} sms #${r.value.smsId}, ledger line #${r.value.ledgerLine} (attempt ${r.record.attempts})`,
    );
  };
  const [first, second] = await Promise.all([onOrderPaid(event), onOrderPaid({ ...event })]);
  report('delivery 1 (webhook)', first);
  report('delivery 2 (the same event, at the same time)', second);
  // The sender never saw the response to delivery 1 and retries later.
  report('delivery 3 (retry after a lost response)', await onOrderPaid({ ...event }));

  const count = (table: string) => (db.prepare(`SELECT COUNT(*) AS n FROM ${table}`).get() as { n: number }).n;
  const smsSent = count('sms_sent');
  const ledgerLines = count('ledger');
  print(
    `SMS sent: ${smsSent}. Ledger lines: ${ledgerLines}. Executed once, replayed ${deliveries.filter((d) => d.replayed).length} times.`,
  );
  db.close();
  await once.close();
  return { deliveries, smsSent, ledgerLines };
}
