import { randomUUID } from 'node:crypto';
import pg from 'pg';

/** The PostgreSQL the tests use; POSTGRES_URL overrides the local default. */
export const POSTGRES_URL = process.env.POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** A schema name no other test run uses, so runs in parallel never see each other's records. */
export function freshSchema(): string {
  return `oncely_t_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
}

/** A pool on the test database that fails fast, instead of hanging, when PostgreSQL is down. */
export function testPool(max = 10): pg.Pool {
  const pool = new pg.Pool({ connectionString: POSTGRES_URL, max, connectionTimeoutMillis: 5_000 });
  pool.on('error', () => {});
  return pool;
}

/** Drops a schema made by freshSchema() and everything in it. */
export async function dropSchema(name: string): Promise<void> {
  if (!/^oncely_t_[a-z0-9]+$/.test(name)) throw new Error(`refusing to drop schema ${JSON.stringify(name)}`);
  const client = new pg.Client({ connectionString: POSTGRES_URL, connectionTimeoutMillis: 5_000 });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS "${name}" CASCADE`);
  } finally {
    await client.end();
  }
}
