import type { Db } from '../db/types.js';
import { postgresStore } from '../postgres/index.js';
import { type SqliteDatabase, SqliteStore } from '../sqlite/store.js';
import type { RecordStore } from '../store.js';

/**
 * The engine's records in an app's own database, so they commit with the app's writes. Callers
 * pass the seam's transaction handle as `tx` on every run: on SQLite the store shares the seam's
 * one connection and must never open a transaction of its own beside it.
 */
export function recordStoreFor(db: Db): RecordStore {
  if (db.dialect === 'sqlite') return new SqliteStore({ database: db.handle as SqliteDatabase });
  const url = new URL(db.target);
  url.searchParams.delete('schema');
  return postgresStore({ connectionString: url.toString(), schema: db.schema ?? 'public', table: 'oncely_records' });
}
