import type { Db } from './types.js';

/**
 * Applies idempotent DDL (`CREATE ... IF NOT EXISTS`) in one transaction. On PostgreSQL an advisory
 * lock makes processes starting together take turns, since IF NOT EXISTS still races in the catalog.
 */
export async function applyDdl(db: Db, lock: number, statements: readonly string[]): Promise<void> {
  await db.transaction(async (tx) => {
    if (tx.dialect === 'postgres') await tx.run(`SELECT pg_advisory_xact_lock(${Math.trunc(lock)})`);
    for (const statement of statements) await tx.run(statement);
  });
}
