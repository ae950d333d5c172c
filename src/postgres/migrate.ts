import type { PgPool } from './driver.js';
import * as sql from './sql.js';

/**
 * Brings the schema to the latest version. Everything runs in one transaction under an advisory
 * lock keyed by the schema, so processes starting together apply each version exactly once and
 * the losers find the work done.
 */
export async function migrate(pool: PgPool, names: sql.Names): Promise<void> {
  const client = await pool.connect();
  let broken: unknown;
  // A checked-out client whose backend dies emits 'error'; unheard, that crashes the process. The
  // statement in flight fails with it anyway, and the client must not go back to the pool.
  const onError = (error: unknown) => {
    broken ??= error;
  };
  client.on?.('error', onError);
  try {
    await client.query('BEGIN');
    try {
      const lock = sql.lockMigrations(names);
      await client.query(lock.text, lock.values);
      const inspect = sql.inspectSchema(names);
      const { rows } = await client.query(inspect.text, inspect.values);
      const found = rows[0] as { has_schema: boolean; has_ledger: boolean };
      if (!found.has_schema) await client.query(sql.createSchema(names).text);
      if (!found.has_ledger) await client.query(sql.createLedger(names).text);
      const applied = await client.query(sql.appliedVersions(names).text);
      const done = new Set(applied.rows.map((row) => Number((row as { version: number }).version)));
      for (const migration of sql.MIGRATIONS) {
        if (done.has(migration.version)) continue;
        for (const statement of migration.up(names)) await client.query(statement);
        const record = sql.recordVersion(names, migration.version);
        await client.query(record.text, record.values);
      }
      await client.query('COMMIT');
    } catch (error) {
      // A connection that cannot even roll back is not given back to the pool.
      await client.query('ROLLBACK').catch((rollbackError: unknown) => {
        broken = rollbackError;
      });
      throw error;
    }
  } finally {
    client.off?.('error', onError);
    client.release(broken instanceof Error ? broken : undefined);
  }
}
