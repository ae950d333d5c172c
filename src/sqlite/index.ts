import { SqliteStore, type SqliteStoreOptions } from './store.js';

export type { SqliteDatabase } from './driver.js';
export { SqliteStore, type SqliteStoreOptions } from './store.js';

/**
 * The embedded default store: a SQLite file in WAL mode with durable commits.
 * @example const once = await createOncely({ store: sqliteStore({ path: './.oncely/oncely.db' }) });
 */
export function sqliteStore(options: SqliteStoreOptions = {}): SqliteStore {
  return new SqliteStore(options);
}
