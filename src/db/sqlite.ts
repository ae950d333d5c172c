import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import type { Db, Sql } from './types.js';

/**
 * SQLite behind one connection. better-sqlite3 is synchronous and a connection has one
 * transaction, so every statement and transaction of the process takes turns through a queue:
 * a statement issued while another caller's transaction is open would silently join it.
 */
export function openSqlite(path: string): Db {
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
  const statements = new Map<string, Database.Statement>();
  const prepare = (sql: string) => {
    let statement = statements.get(sql);
    if (!statement) {
      statement = db.prepare(sql);
      statements.set(sql, statement);
    }
    return statement;
  };
  const bind = (params: readonly unknown[]) => params.map((p) => (typeof p === 'boolean' ? Number(p) : p));
  const direct: Sql = {
    dialect: 'sqlite',
    handle: db,
    async all<R>(sql: string, params: readonly unknown[] = []) {
      return prepare(sql).all(...bind(params)) as R[];
    },
    async run(sql: string, params: readonly unknown[] = []) {
      const statement = prepare(sql);
      if (!statement.reader) return statement.run(...bind(params)).changes;
      statement.all(...bind(params));
      return 0;
    },
  };
  // Writes outside a transaction issued in the same turn commit together: one fsync for the burst.
  let writes: {
    sql: string;
    params: readonly unknown[] | undefined;
    resolve: (n: number) => void;
    reject: (e: unknown) => void;
  }[] = [];
  const flush = () =>
    void serial(async () => {
      const batch = writes;
      writes = [];
      const results: { ok: boolean; value: unknown }[] = [];
      try {
        db.exec('BEGIN IMMEDIATE');
        for (const write of batch) {
          try {
            results.push({ ok: true, value: await direct.run(write.sql, write.params) });
          } catch (error) {
            results.push({ ok: false, value: error });
          }
        }
        db.exec('COMMIT');
      } catch (error) {
        if (db.inTransaction) db.exec('ROLLBACK');
        for (const write of batch) write.reject(error);
        return;
      }
      batch.forEach((write, i) => {
        const result = results[i];
        if (result?.ok) write.resolve(result.value as number);
        else write.reject(result?.value);
      });
    });
  return {
    dialect: 'sqlite',
    handle: db,
    target: path,
    all: (sql, params) => serial(() => direct.all(sql, params)),
    run: (sql, params) =>
      new Promise<number>((resolve, reject) => {
        writes.push({ sql, params, resolve, reject });
        if (writes.length === 1) setImmediate(flush);
      }),
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
  };
}
