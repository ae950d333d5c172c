import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import type Database from 'better-sqlite3';
import { Lru } from '../core/lru.js';
import { loadPeer } from '../core/peer.js';
import { GroupCommit } from './group-commit.js';
import { type Db, type Sql, STATEMENT_CACHE_MAX, type StatementCache } from './types.js';

type Row = Record<string, unknown>;

const MIN_SAFE = BigInt(Number.MIN_SAFE_INTEGER);
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/**
 * Readers run with safe integers (every integer a bigint) so that values past 2^53 are never
 * rounded; the ones a number holds exactly are turned back into numbers here.
 */
function exact(rows: Row[]): Row[] {
  for (const row of rows) {
    for (const name in row) {
      const value = row[name];
      if (typeof value === 'bigint' && value >= MIN_SAFE && value <= MAX_SAFE) row[name] = Number(value);
    }
  }
  return rows;
}

/**
 * The SQLite driver, an optional peer (`npm i oncely` brings none), for `what` to name when it is
 * missing. At its major: the latest better-sqlite3 needs a newer Node than oncely supports.
 */
export async function loadSqliteDriver(what: string): Promise<typeof import('better-sqlite3')> {
  return (await loadPeer(() => import('better-sqlite3'), what, ['better-sqlite3@12'])).default;
}

/**
 * SQLite behind one connection. better-sqlite3 is synchronous and a connection has one
 * transaction, so every statement and transaction of the process takes turns through a queue:
 * a statement issued while another caller's transaction is open would silently join it.
 */
export async function openSqlite(path: string): Promise<Db & StatementCache> {
  const Database = await loadSqliteDriver('a SQLite database');
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  const db = new Database(path);
  db.pragma('busy_timeout = 5000');
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  db.pragma('foreign_keys = ON');
  let turn: Promise<unknown> = Promise.resolve();
  const serial = <T>(fn: () => Promise<T> | T): Promise<T> => {
    const next = turn.then(fn, fn);
    turn = next.catch(() => undefined);
    return next;
  };
  // Bounded: statement texts vary with the shape of callers' queries, and each holds native memory.
  const statements = new Lru<string, Database.Statement>(STATEMENT_CACHE_MAX);
  const prepare = (sql: string) => {
    let statement = statements.get(sql);
    if (!statement) {
      statement = db.prepare(sql);
      if (statement.reader) statement.safeIntegers(true);
      statements.set(sql, statement);
    }
    return statement;
  };
  const bind = (params: readonly unknown[]) => params.map((p) => (typeof p === 'boolean' ? Number(p) : p));
  const runNow = (sql: string, params: readonly unknown[] = []): number => {
    const statement = prepare(sql);
    if (!statement.reader) return statement.run(...bind(params)).changes;
    statement.all(...bind(params));
    return 0;
  };
  const direct: Sql = {
    dialect: 'sqlite',
    handle: db,
    async all<R>(sql: string, params: readonly unknown[] = []) {
      return exact(prepare(sql).all(...bind(params)) as Row[]) as R[];
    },
    async run(sql: string, params: readonly unknown[] = []) {
      return runNow(sql, params);
    },
  };
  // Writes outside a transaction issued in the same turn commit together: one fsync for the burst.
  const writes = new GroupCommit(db, (commit) => void serial(commit));
  return {
    dialect: 'sqlite',
    handle: db,
    target: path,
    all: (sql, params) => serial(() => direct.all(sql, params)),
    run: (sql, params) => writes.push(() => runNow(sql, params)),
    exec: (script) => serial(() => void db.exec(script)),
    transaction: (fn) =>
      serial(async () => {
        db.exec('BEGIN IMMEDIATE');
        try {
          const result = await fn(direct);
          db.exec('COMMIT');
          return result;
        } catch (error) {
          if (db.inTransaction) db.exec('ROLLBACK');
          throw error;
        }
      }),
    close: () => serial(() => void db.close()),
    cachedStatements: () => statements.size,
  };
}
