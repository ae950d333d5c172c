import { OncelyError } from '../core/errors.js';
import { Lru } from '../core/lru.js';
import { loadPeer } from '../core/peer.js';
import { checkUrl } from '../core/url.js';
import type { PgDriverPool, PgPoolClient, PgQueryable } from '../postgres/driver.js';
import { type Db, type Sql, STATEMENT_CACHE_MAX, type StatementCache } from './types.js';

/** Options of openPostgres. */
export interface PostgresOptions {
  /** Connections of the pool (pg's `max`): each open transaction holds one. Default 10. */
  poolSize?: number;
}

// SQLSTATE classes and codes of a lost or refused connection: 08 connection exception, 57P01-03
// admin/crash shutdown and cannot connect now (pg_terminate_backend, restarts, failovers), 53300
// too many connections.
const LOST_CODES = /^(08...|57P0[123]|53300)$/;
const LOST_SYSCALLS = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENOTFOUND']);
// pg reports a connection it lost or could not make by message only.
const LOST_MESSAGES = /Connection terminated|not queryable|timeout exceeded when trying to connect/;

/** True when `error` says the connection failed, not the statement: the work may succeed on another. */
function connectionLost(error: unknown): boolean {
  if (OncelyError.is(error)) return error.code === 'STORE_UNAVAILABLE';
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && (LOST_CODES.test(code) || LOST_SYSCALLS.has(code))) return true;
  return LOST_MESSAGES.test(error.message);
}

function unavailable(error: unknown): OncelyError {
  if (OncelyError.is(error) && error.code === 'STORE_UNAVAILABLE') return error;
  const why = error instanceof Error ? error.message : String(error);
  return new OncelyError('STORE_UNAVAILABLE', `PostgreSQL connection lost: ${why}`, { cause: error });
}

/** `error` as the caller should see it: a lost connection is STORE_UNAVAILABLE, anything else as it is. */
const surfaced = (error: unknown): unknown => (connectionLost(error) ? unavailable(error) : error);

/**
 * PostgreSQL through a pool; each transaction has a connection of its own. A `schema` query
 * parameter (`postgres://.../db?schema=shop`) puts every table of the app and of oncely in that
 * schema, created if missing. A connection that breaks (a terminated backend, a restart) fails
 * its call with STORE_UNAVAILABLE and is dropped from the pool; the process keeps serving.
 */
export async function openPostgres(target: string, options: PostgresOptions = {}): Promise<Db & StatementCache> {
  const { poolSize = 10 } = options;
  if (!Number.isSafeInteger(poolSize) || poolSize < 1)
    throw new OncelyError('INVALID_ARGUMENT', `poolSize must be a positive integer, got ${poolSize}`);
  const url = checkUrl(target, 'the database');
  const schema = url.searchParams.get('schema') ?? 'public';
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(schema))
    throw new OncelyError('INVALID_ARGUMENT', `schema must be a plain lower-case identifier, got ${schema}`);
  url.searchParams.delete('schema');
  const pg = await loadPeer(() => import('pg'), 'a postgres:// database', ['pg']);
  // Every connection sees the app's schema first, so unqualified names resolve there.
  const pool: PgDriverPool = new (pg.default ?? pg).Pool({
    connectionString: url.toString(),
    max: poolSize,
    options: `-c search_path=${schema}`,
  });
  // An idle connection that breaks is discarded by the pool; the next checkout opens another.
  pool.on('error', () => {});

  // `?` placeholders become `$1, $2, ...` once per statement text; bounded like SQLite's statements.
  const numbered = new Lru<string, string>(STATEMENT_CACHE_MAX);
  const toPg = (sql: string): string => {
    const hit = numbered.get(sql);
    if (hit !== undefined) return hit;
    let i = 0;
    return numbered.set(
      sql,
      sql.replace(/\?/g, () => `$${++i}`),
    );
  };
  const over = (client: PgQueryable, handle: unknown): Sql => ({
    dialect: 'postgres',
    handle,
    async all<R>(sql: string, params: readonly unknown[] = []) {
      try {
        return (await client.query(toPg(sql), [...params])).rows as R[];
      } catch (error) {
        throw surfaced(error);
      }
    },
    async run(sql: string, params: readonly unknown[] = []) {
      try {
        return (await client.query(toPg(sql), [...params])).rowCount ?? 0;
      } catch (error) {
        throw surfaced(error);
      }
    },
  });

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
      // Scripts go as they are: no numbering (a `?` there is SQL's), and no cache entry.
      await pool.query(script).catch((error: unknown) => {
        throw surfaced(error);
      });
    },
    async transaction(fn) {
      // A checked-out client has no listener of the pool's: without this one, a backend terminated
      // mid-transaction emits an unhandled 'error' and takes the process down. It is attached in
      // the checkout callback itself: the pool calls it synchronously, while a promise would leave
      // a gap in which a FATAL message parsed from the same socket chunk finds no listener.
      let lost: Error | undefined;
      const onError = (error: Error) => {
        lost ??= error;
      };
      const client = await new Promise<PgPoolClient>((resolve, reject) =>
        pool.connect((error, checkedOut) => {
          if (error || !checkedOut) return reject(unavailable(error));
          checkedOut.on?.('error', onError);
          resolve(checkedOut);
        }),
      );
      let broken: Error | undefined;
      try {
        await client.query('BEGIN');
        const result = await fn(over(client, client));
        await client.query('COMMIT');
        return result;
      } catch (error) {
        if (lost === undefined && !connectionLost(error)) {
          // The connection looks fine: undo, and hand the caller its own error.
          try {
            await client.query('ROLLBACK');
          } catch (rollback) {
            broken = rollback as Error;
          }
          if (broken === undefined || !connectionLost(broken)) throw error;
          throw unavailable(broken);
        }
        broken = lost ?? (error as Error);
        throw unavailable(broken);
      } finally {
        // An error releases the connection to be destroyed, never handed to the next caller.
        client.release(broken ?? lost);
        client.off?.('error', onError);
      }
    },
    close: () => pool.end(),
    cachedStatements: () => numbered.size,
  };
}

/**
 * A Db on one checked-out connection, for work that must stay on it: a record store migrating with
 * its own schema first on the connection's search path. Not for serving: it has no pool, and its
 * transactions take the one connection.
 */
export function connectionDb(client: PgQueryable, schema: string): Db {
  const toPg = (sql: string): string => {
    let i = 0;
    return sql.replace(/\?/g, () => `$${++i}`);
  };
  const sql: Sql = {
    dialect: 'postgres',
    handle: client,
    async all<R>(text: string, params: readonly unknown[] = []) {
      return (await client.query(toPg(text), [...params])).rows as R[];
    },
    async run(text: string, params: readonly unknown[] = []) {
      return (await client.query(toPg(text), [...params])).rowCount ?? 0;
    },
  };
  return {
    ...sql,
    target: 'connection',
    schema,
    async exec(script) {
      await client.query(script);
    },
    async transaction(fn) {
      await client.query('BEGIN');
      try {
        const result = await fn(sql);
        await client.query('COMMIT');
        return result;
      } catch (error) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw error;
      }
    },
    close: async () => undefined,
  };
}
