import type { Db, Sql } from './types.js';

interface PgClient {
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[]; rowCount: number | null }>;
}
interface PgPoolClient extends PgClient {
  release(error?: Error | boolean): void;
}
interface PgPool extends PgClient {
  connect(): Promise<PgPoolClient>;
  end(): Promise<void>;
}

// `?` placeholders become `$1, $2, ...` once per statement text.
const numbered = new Map<string, string>();
function toPg(sql: string): string {
  let text = numbered.get(sql);
  if (text === undefined) {
    let i = 0;
    text = sql.replace(/\?/g, () => `$${++i}`);
    numbered.set(sql, text);
  }
  return text;
}

function over(client: PgClient, handle: unknown): Sql {
  return {
    dialect: 'postgres',
    handle,
    async all<R>(sql: string, params: readonly unknown[] = []) {
      return (await client.query(toPg(sql), [...params])).rows as R[];
    },
    async run(sql: string, params: readonly unknown[] = []) {
      return (await client.query(toPg(sql), [...params])).rowCount ?? 0;
    },
  };
}

/**
 * PostgreSQL through a pool; each transaction has a connection of its own. A `schema` query
 * parameter (`postgres://.../db?schema=shop`) puts every table of the app and of oncely in that
 * schema, created if missing.
 */
export async function openPostgres(target: string, max = 10): Promise<Db> {
  const url = new URL(target);
  const schema = url.searchParams.get('schema') ?? 'public';
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(schema))
    throw new Error(`schema must be a plain lower-case identifier, got ${schema}`);
  url.searchParams.delete('schema');
  const pg = await import('pg');
  // Every connection sees the app's schema first, so unqualified names resolve there.
  const pool: PgPool = new (pg.default ?? pg).Pool({
    connectionString: url.toString(),
    max,
    options: `-c search_path=${schema}`,
  });
  (pool as unknown as { on(event: string, fn: () => void): void }).on('error', () => {});
  await pool.query(`CREATE SCHEMA IF NOT EXISTS "${schema}"`).catch((error: { code?: string }) => {
    // Several processes starting at once: IF NOT EXISTS still races in the catalog; the schema exists either way.
    if (error.code !== '23505' && error.code !== '42P06') throw error;
  });
  const base = over(pool, pool);
  return {
    ...base,
    target,
    schema,
    async exec(script) {
      await pool.query(script);
    },
    async transaction(fn) {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        const result = await fn(over(client, client));
        await client.query('COMMIT');
        return result;
      } catch (error) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw error;
      } finally {
        client.release();
      }
    },
    close: () => pool.end(),
  };
}
