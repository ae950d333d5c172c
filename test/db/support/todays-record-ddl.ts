/**
 * The record stores' tables and ledgers exactly as the code before the one migration convention
 * created them (copied from src/sqlite/store.ts, src/sqlite/sql.ts, src/postgres/migrate.ts and
 * src/postgres/sql.ts of that version), so the test opens a database made by it. Do not edit to
 * follow the code.
 */

/** SQLite: the store's own ledger with version 1 applied, and the records table. */
export const TODAYS_SQLITE_RECORDS = [
  'CREATE TABLE IF NOT EXISTS oncely_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)',
  `CREATE TABLE IF NOT EXISTS oncely_records (
    tenant TEXT NOT NULL,
    action TEXT NOT NULL,
    key TEXT NOT NULL,
    state TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    fence INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    lease_until INTEGER,
    result TEXT,
    trace_id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    completed_at INTEGER,
    expires_at INTEGER,
    PRIMARY KEY (tenant, action, key)
  ) WITHOUT ROWID;
  CREATE INDEX IF NOT EXISTS oncely_records_expires ON oncely_records (expires_at) WHERE expires_at IS NOT NULL;`,
  'INSERT INTO oncely_migrations (version, applied_at) VALUES (1, 1)',
];

/** PostgreSQL, in `schema` with the default table: the ledger `migrations` with version 1, and `records`. */
export function todaysPostgresRecords(schema: string): string[] {
  const records = `"${schema}"."records"`;
  return [
    `CREATE SCHEMA IF NOT EXISTS "${schema}"`,
    `CREATE TABLE IF NOT EXISTS "${schema}"."migrations" (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`,
    `CREATE TABLE ${records} (
  tenant text NOT NULL,
  action text NOT NULL,
  key text NOT NULL,
  state text NOT NULL CHECK (state IN ('in_progress', 'succeeded', 'failed', 'released', 'unknown')),
  fingerprint text NOT NULL,
  fence bigint NOT NULL,
  attempts int NOT NULL,
  lease_until bigint,
  result text,
  trace_id text NOT NULL,
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL,
  completed_at bigint,
  expires_at bigint,
  PRIMARY KEY (tenant, action, key)
)`,
    `CREATE INDEX "records_expires_at" ON ${records} (expires_at) WHERE expires_at IS NOT NULL`,
    `INSERT INTO "${schema}"."migrations" (version) VALUES (1)`,
  ];
}
