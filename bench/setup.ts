import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import { ownedClientOptions, recordKey as storeRecordKey } from '../src/redis/store.js';

/** Where the services are; the environment overrides the local defaults. */
export const PG_URL = process.env.PG_URL ?? process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
export const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
export const MYSQL_URL = process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';

/**
 * An ioredis client made as `redisStore({ url })` makes its own (the options are imported from
 * src/redis/store.ts, so they cannot drift): the Redis floor runs on one, so floor and store pay
 * the same driver costs.
 */
export async function storeDriverClient(): Promise<Redis> {
  const client = new Redis(REDIS_URL, ownedClientOptions());
  client.on('error', () => {});
  await client.connect();
  return client;
}

/**
 * A node-redis client that, like the store's, neither reconnects, queues offline, nor arms a
 * per-command timeout: Powertools runs on one (node-redis is the client its docs name), and so
 * does the second Redis floor, the same two statements through the other Node driver.
 */
export const NODE_REDIS_OPTIONS = {
  url: REDIS_URL,
  disableOfflineQueue: true,
  socket: { reconnectStrategy: false as const },
  commandOptions: { timeout: 0 },
};

/** The pool size `postgresStore({ connectionString })` opens (see openPool in src/postgres/store.ts). */
export const PG_POOL_MAX = 10;

/** The pool size `mysqlStore({ uri })` opens (see openPool in src/mysql/store.ts). */
export const MYSQL_POOL_MAX = 10;

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
