import { OncelyError } from '../core/errors.js';
import type { Db, Sql } from './types.js';

/**
 * One change to a component's tables, with its text for each dialect. Steps run in version order,
 * each once per database, recorded in `oncely_component_migrations`. (Not `oncely_migrations`: the
 * SQLite record store's ledger of older releases has that name, without a component column.)
 */
export interface MigrationStep {
  version: number;
  sqlite: string | readonly string[];
  postgres: string | readonly string[];
  /**
   * The column this step adds, when databases made before the ledger may have it already (their
   * tables were created with it): the step is then recorded without running.
   */
  adds?: { table: string; column: string };
}

/** The tables one component owns (`records`, `events`, `outbox`, `flows`, `agent`), as versioned steps. */
export interface Migrations {
  component: string;
  steps: readonly MigrationStep[];
  /**
   * A ledger of older releases with a `version` column (the record stores kept their own): its
   * versions are copied into this one first, so a database they made goes on from where it is.
   */
  formerLedger?: string;
}

const LEDGER = `CREATE TABLE IF NOT EXISTS oncely_component_migrations (
  component TEXT NOT NULL,
  version INTEGER NOT NULL,
  applied_at BIGINT NOT NULL,
  PRIMARY KEY (component, version)
)`;

const LEDGER_INSERT = 'INSERT INTO oncely_component_migrations (component, version, applied_at) VALUES (?, ?, ?)';

/**
 * Serializes oncely's migrations within the transaction `tx`: on PostgreSQL an advisory lock
 * derived from the schema (IF NOT EXISTS alone races in the catalog, and two components both
 * create the ledger); SQLite's transactions hold the write lock already (BEGIN IMMEDIATE).
 */
export async function migrationLock(tx: Sql): Promise<void> {
  if (tx.dialect === 'postgres')
    await tx.all("SELECT pg_advisory_xact_lock(hashtextextended('oncely:migrate:' || current_schema(), 0))");
}

/**
 * Brings a component's tables to its latest version, in one transaction; safe to run from several
 * processes at once. Tables made before the ledger existed adopt it: version 1 of every component
 * is its first tables with `IF NOT EXISTS`, so it leaves them and their rows as they are.
 * @example await migrate(db, { component: 'outbox', steps: [{ version: 1, sqlite: DDL, postgres: DDL }] })
 */
export async function migrate(db: Db, migrations: Migrations): Promise<void> {
  const latest = check(migrations);
  // Read without a lock first: most starts find every step applied, and on PostgreSQL even a
  // CREATE INDEX IF NOT EXISTS waits for every open transaction on its table.
  if ((await appliedVersion(db, migrations.component).catch(() => 0)) >= latest) return;
  await db.transaction(async (tx) => {
    await migrationLock(tx);
    await tx.run(LEDGER);
    const applied = new Set(
      (
        await tx.all<{ version: number | string }>(
          'SELECT version FROM oncely_component_migrations WHERE component = ?',
          [migrations.component],
        )
      ).map((row) => Number(row.version)),
    );
    if (migrations.formerLedger && (await hasTable(tx, migrations.formerLedger)))
      for (const row of await tx.all<{ version: number | string }>(`SELECT version FROM ${migrations.formerLedger}`)) {
        const version = Number(row.version);
        if (applied.has(version)) continue;
        await tx.run(LEDGER_INSERT, [migrations.component, version, Date.now()]);
        applied.add(version);
      }
    for (const step of migrations.steps) {
      if (applied.has(step.version)) continue;
      if (!step.adds || !(await hasColumn(tx, step.adds.table, step.adds.column)))
        for (const statement of statements(step[tx.dialect])) await tx.run(statement);
      await tx.run(LEDGER_INSERT, [migrations.component, step.version, Date.now()]);
    }
  });
}

/** The highest version of `component` this database has applied; 0 for none. */
export async function appliedVersion(sql: Sql, component: string): Promise<number> {
  const [row] = await sql.all<{ version: number | string | null }>(
    'SELECT MAX(version) AS version FROM oncely_component_migrations WHERE component = ?',
    [component],
  );
  return Number(row?.version ?? 0);
}

function check({ component, steps }: Migrations): number {
  let previous = 0;
  for (const step of steps) {
    if (!Number.isSafeInteger(step.version) || step.version !== previous + 1)
      throw new OncelyError(
        'INVALID_ARGUMENT',
        `migrations of ${component} must be numbered 1, 2, 3...; ${step.version} follows ${previous}`,
      );
    previous = step.version;
  }
  return previous;
}

const statements = (text: string | readonly string[]): readonly string[] => (typeof text === 'string' ? [text] : text);

async function hasColumn(tx: Sql, table: string, column: string): Promise<boolean> {
  const rows =
    tx.dialect === 'postgres'
      ? await tx.all(
          'SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(?) AND attname = ? AND NOT attisdropped',
          [table, column],
        )
      : await tx.all('SELECT 1 FROM pragma_table_info(?) WHERE name = ?', [table, column]);
  return rows.length > 0;
}

async function hasTable(tx: Sql, table: string): Promise<boolean> {
  const rows =
    tx.dialect === 'postgres'
      ? await tx.all('SELECT 1 WHERE to_regclass(?) IS NOT NULL', [table])
      : await tx.all("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", [table]);
  return rows.length > 0;
}
