import { join } from 'node:path';
import { openDb } from '../db/index.js';
import type { Db } from '../db/types.js';
import { postgresStore } from '../postgres/index.js';
import { type SqliteDatabase, SqliteStore } from '../sqlite/store.js';
import type { RecordStore } from '../store.js';
import { loadApp } from './app.js';
import { createHost, type Host } from './host.js';

/** The engine's records in the app's own database, so they commit with the app's writes. */
function recordStoreFor(db: Db): RecordStore {
  if (db.dialect === 'sqlite') return new SqliteStore({ database: db.handle as SqliteDatabase });
  const url = new URL(db.target);
  url.searchParams.delete('schema');
  return postgresStore({ connectionString: url.toString(), schema: db.schema ?? 'public', table: 'oncely_records' });
}

/**
 * Loads the app in `dir` and builds its host on `db` (a SQLite path or a postgres:// URL; default:
 * the app's config, else `<dir>/.oncely/app.db`). Migrates before returning.
 * @example const host = await openHost('examples/shop'); await host.start(3000);
 */
export async function openHost(dir: string, db?: string): Promise<Host> {
  const app = await loadApp(dir);
  const database = await openDb(db ?? app.config.db ?? join(app.dir, '.oncely', 'app.db'));
  const host = await createHost(app, database, recordStoreFor(database));
  await host.migrate();
  return host;
}
