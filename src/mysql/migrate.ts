import { OncelyError } from '../core/errors.js';
import type { MysqlConnection, MysqlPool } from './driver.js';
import * as sql from './sql.js';

/** How long a process waits for another's migration before giving up, in seconds. */
const LOCK_WAIT_S = 60;

/** The lock's name, one per database; at most 64 characters, so the database's name goes in hashed. */
const LOCK_NAME = "CONCAT('oncely:migrate:', SHA1(COALESCE(?, DATABASE())))";

const rowsOf = async <R>(connection: MysqlConnection, text: string, values: unknown[] = []): Promise<R[]> =>
  (await connection.query(text, values))[0] as R[];

/**
 * Brings the records table to the latest version by the one migration convention of
 * db/migrate.ts (a ledger `oncely_component_migrations` of component and version, steps applied
 * once each, in order), on one connection of the pool. MySQL commits DDL as it runs, so the steps
 * are serialized by a named lock (GET_LOCK) per database rather than a transaction: processes
 * starting together apply each version exactly once and the losers find the work done.
 */
export async function migrate(pool: MysqlPool, n: sql.Names): Promise<void> {
  const steps = sql.recordSteps(n);
  const latest = steps[steps.length - 1]?.version ?? 0;
  const component = sql.component(n);
  const connection = await pool.getConnection();
  try {
    if (n.database !== undefined) await connection.query(`CREATE DATABASE IF NOT EXISTS \`${n.database}\``);
    const applied = async () =>
      new Set(
        (
          await rowsOf<{ version: number }>(connection, `SELECT version FROM ${n.ledger} WHERE component = ?`, [
            component,
          ])
        ).map((row) => Number(row.version)),
      );
    // Read without the lock first: most starts find every step applied.
    if ((await applied().catch(() => new Set<number>())).has(latest)) return;
    const [got] = await rowsOf<{ got: number | null }>(connection, `SELECT GET_LOCK(${LOCK_NAME}, ?) AS got`, [
      n.database ?? null,
      LOCK_WAIT_S,
    ]);
    if (Number(got?.got) !== 1)
      throw new OncelyError('STORE_UNAVAILABLE', `another process held the migration lock for ${LOCK_WAIT_S} s`);
    try {
      await connection.query(sql.createLedger(n));
      const done = await applied();
      for (const step of steps) {
        if (done.has(step.version)) continue;
        for (const statement of step.statements) await connection.query(statement);
        await connection.query(`INSERT INTO ${n.ledger} (component, version, applied_at) VALUES (?, ?, ?)`, [
          component,
          step.version,
          Date.now(),
        ]);
      }
    } finally {
      await connection.query(`SELECT RELEASE_LOCK(${LOCK_NAME})`, [n.database ?? null]);
    }
  } finally {
    connection.release();
  }
}
