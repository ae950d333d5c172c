import { migrate } from '../db/migrate.js';
import type { Db, Sql } from '../db/types.js';
import type { SqliteDatabase } from './driver.js';
import { RECORD_MIGRATIONS } from './sql.js';

/**
 * Brings the records table of `db` to the latest version by the one migration convention
 * (db/migrate.ts). Its transaction is BEGIN IMMEDIATE, so processes opening one file at once take
 * turns; inside a caller's open transaction the steps join it instead.
 */
export function migrateRecords(db: SqliteDatabase): Promise<void> {
  return migrate(handleDb(db), RECORD_MIGRATIONS);
}

/** The Db seam over a better-sqlite3 handle the store was given or opened, for its migration alone. */
function handleDb(db: SqliteDatabase): Db {
  const sql: Sql = {
    dialect: 'sqlite',
    handle: db,
    async all<R>(text: string, params: readonly unknown[] = []) {
      return db.prepare(text).all(...params) as R[];
    },
    async run(text: string, params: readonly unknown[] = []) {
      return db.prepare(text).run(...params).changes;
    },
  };
  return {
    ...sql,
    target: 'handle',
    async exec(script) {
      db.exec(script);
    },
    async transaction(fn) {
      if (db.inTransaction) return fn(sql);
      db.exec('BEGIN IMMEDIATE');
      try {
        const result = await fn(sql);
        db.exec('COMMIT');
        return result;
      } catch (error) {
        if (db.inTransaction) db.exec('ROLLBACK');
        throw error;
      }
    },
    close: async () => undefined,
  };
}
