import { migrate as migrateTables } from '../db/migrate.js';
import { connectionDb } from '../db/postgres.js';
import type { PgPool } from './driver.js';
import * as sql from './sql.js';

/**
 * Brings the records table to the latest version by the one migration convention
 * (db/migrate.ts: the schema's ledger, one advisory lock per schema), on one connection of the
 * pool with the store's schema first on its search path, so processes starting together apply
 * each version exactly once and the losers find the work done.
 */
export async function migrate(pool: PgPool, names: sql.Names): Promise<void> {
  const client = await pool.connect();
  let broken: Error | undefined;
  // A checked-out client whose backend dies emits 'error'; unheard, that crashes the process. The
  // statement in flight fails with it anyway.
  const onError = (error: Error) => {
    broken ??= error;
  };
  client.on?.('error', onError);
  try {
    const inspect = sql.hasSchema(names);
    const { rows } = await client.query(inspect.text, inspect.values);
    if (!(rows[0] as { has_schema: boolean }).has_schema)
      await client.query(sql.createSchema(names).text).catch((error: { code?: string }) => {
        // Processes starting together: IF NOT EXISTS still races in the catalog; it exists either way.
        if (error.code !== '23505' && error.code !== '42P06') throw error;
      });
    // The connection's own path is put back after: a Db's pool, or a caller's, may have set one.
    const path = await client.query(sql.searchPath().text);
    await client.query(sql.useSchema(names).text);
    await migrateTables(connectionDb(client, names.schema), sql.recordMigrations(names));
    const restore = sql.setSearchPath((path.rows[0] as { path: string }).path);
    await client.query(restore.text, restore.values);
  } catch (error) {
    // The connection may still carry the store's path or a broken transaction: never reused.
    broken ??= error instanceof Error ? error : new Error(String(error));
    throw error;
  } finally {
    client.off?.('error', onError);
    client.release(broken);
  }
}
