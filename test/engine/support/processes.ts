/**
 * The across-processes suites' harness: the stores their processes meet in, each fresh per test
 * file (a schema, a key prefix, a database of its own), a downstream that dedupes on keys, and one
 * describe per store with an engine on it.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { createOncely, type Oncely } from '../../../src/index.js';
import { dropDatabase, freshDatabase, MYSQL_URL } from '../../support/mysql.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../../support/postgres.js';
import { connectRedis, dropPrefix, freshPrefix, REDIS_URL } from '../../support/redis.js';
import { startWorker } from '../../support/spawn.js';
import { type StoreName, selectStores } from '../../support/store-filter.js';
import { openStore, type StoreSpec } from '../../support/stores.js';

/** For waits whose duration is the point (a lease running out, a holder busy for a while). */
// sleep: the helper itself; each call says why its duration matters.
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A downstream (an SMS gateway, a payment provider) that dedupes on the key it is given, and logs every call. */
export function makeSink(): { path: string; effects(key: string): number; calls(key: string): number } {
  const path = join(mkdtempSync(join(tmpdir(), 'oncely-sink-')), 'sink.db');
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.exec(`CREATE TABLE effects (idempotency_key TEXT PRIMARY KEY, done_by TEXT);
           CREATE TABLE calls (id INTEGER PRIMARY KEY, idempotency_key TEXT, done_by TEXT)`);
  db.close();
  const count = (sql: string, key: string) => {
    const reader = new Database(path, { readonly: true });
    const n = (reader.prepare(sql).get(key) as { n: number }).n;
    reader.close();
    return n;
  };
  return {
    path,
    effects: (key) => count('SELECT COUNT(*) AS n FROM effects WHERE idempotency_key = ?', key),
    calls: (key) => count('SELECT COUNT(*) AS n FROM calls WHERE idempotency_key = ?', key),
  };
}

/**
 * 4 processes x 50 concurrent calls of one key on `spec`: one execution, one downstream call, and
 * every other caller replayed the winner's value or was told IN_PROGRESS (a waiter never is).
 */
export async function burstOneKey(spec: StoreSpec, action: string): Promise<void> {
  const sink = makeSink();
  const workers = Array.from({ length: 4 }, () =>
    startWorker({ store: spec, mode: 'burst', action, key: 'ORD-1:sms', calls: 50, sink: sink.path }),
  );
  await Promise.all(workers.map((w) => w.waitFor('ready')));
  for (const w of workers) w.child.stdin.write('go\n');
  const reports = await Promise.all(
    workers.map(
      async (w) =>
        JSON.parse(await w.waitFor('{')) as {
          executed: number;
          outcomes: { kind: string; waited: boolean; value?: { by: number } }[];
        },
    ),
  );
  const outcomes = reports.flatMap((r) => r.outcomes);
  expect(reports.reduce((n, r) => n + r.executed, 0)).toBe(1);
  expect(sink.calls('ORD-1:sms')).toBe(1);
  expect(outcomes).toHaveLength(200);
  expect(outcomes.filter((o) => o.kind === 'executed')).toHaveLength(1);
  const winner = outcomes.find((o) => o.kind === 'executed')?.value?.by;
  expect(winner).toBeTypeOf('number');
  for (const o of outcomes) {
    expect(['executed', 'replayed', 'IN_PROGRESS']).toContain(o.kind);
    if (o.waited) expect(o.kind === 'executed' || o.kind === 'replayed').toBe(true);
    if (o.kind === 'replayed') expect(o.value?.by).toBe(winner);
  }
  await Promise.all(workers.map((w) => w.exited));
}

/** One store: where its processes meet, and how its leftovers are dropped after the file. */
interface ProcessStore {
  name: StoreName;
  spec: () => StoreSpec;
  cleanup?: () => Promise<void>;
  /** A clock of its own (PostgreSQL, Redis, MySQL): SQLite is one host, one clock. */
  ownClock: boolean;
}

/** The four stores (those ONCELY_STORES selects), each fresh for the test file that calls this. */
function processStores(): ProcessStore[] {
  const schema = freshSchema();
  const prefix = freshPrefix();
  const database = freshDatabase();
  return selectStores<ProcessStore>([
    {
      name: 'sqlite',
      spec: () => ({ kind: 'sqlite', path: join(mkdtempSync(join(tmpdir(), 'oncely-proc-')), 'shared.db') }),
      ownClock: false,
    },
    {
      name: 'postgres',
      spec: () => ({ kind: 'postgres', connectionString: POSTGRES_URL, schema }),
      cleanup: () => dropSchema(schema),
      ownClock: true,
    },
    {
      name: 'redis',
      spec: () => ({ kind: 'redis', url: REDIS_URL, prefix }),
      cleanup: async () => {
        const client = await connectRedis();
        await dropPrefix(client, prefix);
        await client.close();
      },
      ownClock: true,
    },
    {
      name: 'mysql',
      // The store creates its database when missing.
      spec: () => ({ kind: 'mysql', uri: MYSQL_URL, database }),
      cleanup: () => dropDatabase(database),
      ownClock: true,
    },
  ]);
}

/** What a store's describe gives its tests: the store's spec and an engine on it (tenant acme), set before the tests. */
export interface OnStore {
  spec: StoreSpec;
  once: Oncely;
}

/** `title: <store>` for each store (only those with a clock of their own when `ownClock`), with `body`'s tests inside. */
export function describeEachStore(title: string, body: (on: OnStore) => void, options: { ownClock?: boolean } = {}) {
  for (const store of processStores()) {
    if (options.ownClock && !store.ownClock) continue;
    describe(`${title}: ${store.name}`, () => {
      const on = {} as OnStore;
      beforeAll(async () => {
        on.spec = store.spec();
        on.once = await createOncely({ store: openStore(on.spec), tenant: 'acme' });
      });
      afterAll(async () => {
        await on.once?.close();
        await store.cleanup?.();
      });
      body(on);
    });
  }
}
