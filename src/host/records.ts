import type { Db } from '../db/types.js';
import type { PgPool } from '../postgres/driver.js';
import { type PostgresStore, postgresStore } from '../postgres/index.js';
import type { SqliteDatabase } from '../sqlite/driver.js';
import { sqliteStore } from '../sqlite/index.js';
import type { RecordStore } from '../store.js';

/**
 * The engine's records in the app's own database, so they commit with the app's writes: on the
 * Db's own connection (SQLite) or pool (PostgreSQL), never a second one. Callers pass the seam's
 * transaction handle as `tx` on every run: on SQLite the store shares the seam's one connection
 * and must never open a transaction of its own beside it.
 */
export function recordStoreFor(db: Db): RecordStore {
  if (db.dialect === 'sqlite') return sqliteStore({ database: db.handle as SqliteDatabase });
  // The Db's handle is its pg Pool; the store leaves a given pool open, so db.close() ends it.
  return postgresStore({ pool: db.handle as PgPool, schema: db.schema ?? 'public', table: 'oncely_records' });
}

/**
 * Creates or upgrades the records table at the host's migrate, before any handler holds a
 * connection: a PostgreSQL store migrating on first use would wait for a second one of the pool,
 * and a SQLite one would migrate inside the handler's transaction.
 */
export async function migrateRecords(store: RecordStore): Promise<void> {
  const migrating = store as Partial<Pick<PostgresStore, 'migrate'>>;
  if (typeof migrating.migrate === 'function') await migrating.migrate();
}
