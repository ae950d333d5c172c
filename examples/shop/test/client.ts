/**
 * The shop as its clients and the kit's child processes call it: one host per process on the
 * shop's database (built with the kit's crash hooks, which are off unless a crash test runs it),
 * and one call of a handler with an idempotency key.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { type Host, openHost } from 'oncely/host';
import { crashHooks, invokeResult, storm } from 'oncely/testing';

export const APP = fileURLToPath(new URL('..', import.meta.url));

/** One call of a handler: its database, name, key and body. */
export interface Invoke {
  db: string;
  handler: string;
  key: string;
  body: unknown;
  /** Broken on purpose: a new random key on every attempt instead of `key`. */
  randomKey?: boolean;
  /** Broken on purpose: a charges row written before the handler's claim. */
  writeFirst?: { orderId: string };
}

const hosts = new Map<string, Promise<Host>>();

/** This process's host of the shop on `db`, opened on first use. */
export function shopHost(db: string): Promise<Host> {
  let host = hosts.get(db);
  if (!host) {
    host = openHost(APP, db, { hooks: crashHooks() });
    hosts.set(db, host);
  }
  return host;
}

/**
 * A fresh shop database with one paid order per name (a crash window), made in a child process of
 * its own (no crash variables there). No host stays open in this process: a SQLite writer here
 * would wait on the children's lock.
 */
export async function paidOrderPerWindow(
  prefix: string,
  names: readonly string[],
): Promise<{ db: string; orders: Record<string, string> }> {
  const db = join(mkdtempSync(join(tmpdir(), prefix)), 'shop.db');
  await (await shopHost(db)).stop();
  hosts.delete(db);
  const made = await storm({
    run: () => undefined,
    sequential: 0,
    concurrent: 1,
    processes: 1,
    child: {
      module: join(APP, 'test', 'deliver.ts'),
      export: 'paidOrders',
      env: { ONCELY_DEMO: '1' },
      input: { db, names },
    },
    effects: () => 1,
  });
  const orders = made.calls.find((c) => c.phase === 'process 1')?.value as Record<string, string>;
  for (const name of names)
    if (!/^ord_/.test(orders?.[name] ?? '')) throw new Error(`no paid order was made for ${name}`);
  return { db, orders };
}

/**
 * Calls the handler; answers `{ value: data, replayed, record: { attempts } }` (the attempt from the
 * host's `Oncely-Attempt` header: above 1 when this call took over a claim whose holder died), throws
 * the error it answered (with its code).
 */
export async function invoke(call: Invoke) {
  const shop = await shopHost(call.db);
  if (call.writeFirst) {
    const db = new Database(call.db);
    db.prepare('INSERT INTO charges (id, order_id, charge_id) VALUES (?, ?, ?)').run(
      randomUUID(),
      call.writeFirst.orderId,
      'audit',
    );
    db.close();
  }
  const res = await shop.http.request(`/v1/invoke/${call.handler}`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'idempotency-key': call.randomKey ? randomUUID() : call.key,
      'x-account': 'acme',
    },
    body: JSON.stringify(call.body),
  });
  return invokeResult(res);
}

/** A count from the shop's database (`SELECT count(*) AS n ...`), read-only beside the hosts. */
export function count(db: string, sql: string, ...args: unknown[]): number {
  const conn = new Database(db, { readonly: true });
  try {
    return (conn.prepare(sql).get(...args) as { n: number }).n;
  } finally {
    conn.close();
  }
}
