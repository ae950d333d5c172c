import { join } from 'node:path';
import mysql from 'mysql2/promise';
import pg from 'pg';
import { createClient } from 'redis';
import { createOncely, type OncelyOptions } from '../src/engine/engine.js';
import { mysqlStore } from '../src/mysql/index.js';
import { postgresStore } from '../src/postgres/index.js';
import { redisStore } from '../src/redis/index.js';
import { sqliteStore } from '../src/sqlite/index.js';
import type { RecordStore } from '../src/store.js';
import type { Operation } from './harness.js';
import { ACTION, dropPrefix, dropSchema, MYSQL_URL, PG_URL, REDIS_URL, TENANT } from './setup.js';

/** The workload on one store: first executions of new keys, replays of keys already done. */
export interface Subject {
  first: Operation;
  replay: Operation;
  close(): Promise<void>;
}

/** The small input every operation sends. */
export const inputOf = (i: number) => ({ id: i, amount: 4200, currency: 'EUR' });

/** What a subject observes (metrics, logger, hook, tracer); the engine's defaults when not given. */
export type Observed = Omit<OncelyOptions, 'store' | 'tenant'>;

/** Runs the workload through `createOncely` on `store`; `cleanup` drops the store's data after close. */
async function subject(store: RecordStore, cleanup: () => Promise<void>, observed: Observed): Promise<Subject> {
  const once = await createOncely({ ...observed, store, tenant: TENANT });
  const call = (i: number) =>
    once.run({ action: ACTION, key: `k${i}`, input: inputOf(i) }, () => ({ ok: true as const, id: i }));
  return {
    async first(i) {
      const r = await call(i);
      if (r.replayed || r.value.id !== i) throw new Error(`key k${i} was not new`);
    },
    async replay(i) {
      const r = await call(i);
      if (!r.replayed || r.value.id !== i) throw new Error(`key k${i} was not replayed`);
    },
    async close() {
      await once.close();
      await cleanup();
    },
  };
}

/** The SQLite store on a file in `dir`, with its defaults (WAL, synchronous=FULL, busy timeout). */
export function sqliteSubject(dir: string, observed: Observed = {}, file = 'oncely.db'): Promise<Subject> {
  return subject(sqliteStore({ path: join(dir, file) }), async () => {}, observed);
}

/** The PostgreSQL store in a fresh schema, dropped afterwards. */
export function postgresSubject(schema: string, observed: Observed = {}): Promise<Subject> {
  return subject(
    postgresStore({ connectionString: PG_URL, schema }),
    async () => {
      const client = new pg.Client({ connectionString: PG_URL });
      await client.connect();
      try {
        await dropSchema(client, schema);
      } finally {
        await client.end();
      }
    },
    observed,
  );
}

/** The MySQL store in a fresh database (it creates it), dropped afterwards. */
export function mysqlSubject(database: string, observed: Observed = {}): Promise<Subject> {
  return subject(
    mysqlStore({ uri: MYSQL_URL, database }),
    async () => {
      const connection = await mysql.createConnection(MYSQL_URL);
      try {
        await connection.query(`DROP DATABASE IF EXISTS \`${database}\``);
      } finally {
        await connection.end();
      }
    },
    observed,
  );
}

/** The Redis store under a fresh prefix, deleted afterwards. */
export function redisSubject(prefix: string, observed: Observed = {}): Promise<Subject> {
  return subject(
    redisStore({ url: REDIS_URL, prefix }),
    async () => {
      const client = createClient({ url: REDIS_URL });
      client.on('error', () => {});
      await client.connect();
      try {
        await dropPrefix(client, prefix);
      } finally {
        await client.close();
      }
    },
    observed,
  );
}
