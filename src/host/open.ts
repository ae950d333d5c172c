import { join } from 'node:path';
import { openDb } from '../db/index.js';
import { recordStoreFor } from '../engine/on-db.js';
import { loadApp } from './app.js';
import { createHost, type Host } from './host.js';

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
