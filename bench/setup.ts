import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient } from 'redis';
import { ownedClientOptions, recordKey as storeRecordKey } from '../src/redis/store.js';

/** Where the services are; the environment overrides the local defaults. */
export const PG_URL = process.env.PG_URL ?? process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
export const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';

/**
 * How `redisStore({ url })` makes its node-redis client (imported from src/redis/store.ts, so they
 * cannot drift): the floor and Powertools get clients made the same way, so all three pay the same
 * driver costs (none of them a per-command timeout; the store's one timer per batch is its own).
 * The floor and Powertools each create one client from it, to the same URL.
 */
export const REDIS_CLIENT_OPTIONS = ownedClientOptions(REDIS_URL);

/** The pool size `postgresStore({ connectionString })` opens (see openPool in src/postgres/store.ts). */
export const PG_POOL_MAX = 10;

/** Tenant and action of every benchmark record. */
export const TENANT = 'bench';
export const ACTION = 'bench';

/** A short random suffix, so runs never collide. */
export const runId = (): string => randomUUID().slice(0, 8);

/** The hash key the Redis store uses for benchmark key `key`, so the floor writes keys of the same length. */
export function recordKey(prefix: string, key: string): string {
  return storeRecordKey(prefix, { tenant: TENANT, action: ACTION, key });
}

/** A fresh directory for database files; `remove` deletes it with everything in it. */
export function scratchDir(): { path: string; remove(): void } {
  const path = mkdtempSync(join(tmpdir(), 'oncely-bench-'));
  return { path, remove: () => rmSync(path, { recursive: true, force: true }) };
}

/** Drops a scratch schema and everything in it. */
export async function dropSchema(db: { query(text: string): Promise<unknown> }, schema: string): Promise<void> {
  await db.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
}

// One way to clear a key prefix, shared with the tests.
export { dropPrefix } from '../test/support/redis.js';

/**
 * Redis's own CPU time so far (user + system, µs, from INFO cpu), read on a client of its own so
 * the reading does not queue behind the measured commands. `close` releases that client.
 */
export async function redisCpu(): Promise<{ read: () => Promise<number>; close: () => Promise<void> }> {
  const client = createClient({ url: REDIS_URL });
  client.on('error', () => {});
  await client.connect();
  return {
    async read() {
      const info = await client.info('cpu');
      const seconds = (name: string) => Number(new RegExp(`${name}:([\\d.]+)`).exec(info)?.[1] ?? Number.NaN);
      return (seconds('used_cpu_user') + seconds('used_cpu_sys')) * 1e6;
    },
    close: () => client.close(),
  };
}
