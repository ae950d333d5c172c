import type { Migrations } from '../db/migrate.js';
import type { Expectation, RecordPatch } from '../store.js';

/** The records table; one per database file. */
export const TABLE = 'oncely_records';

/**
 * The records table as the component `records` of the one migration convention (db/migrate.ts).
 * The store's ledger of older releases, `oncely_migrations`, is carried over. Append new versions,
 * never edit applied ones.
 */
export const RECORD_MIGRATIONS: Migrations = {
  component: 'records',
  formerLedger: 'oncely_migrations',
  steps: [
    {
      version: 1,
      sqlite: [
        `CREATE TABLE IF NOT EXISTS ${TABLE} (
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
  ) WITHOUT ROWID`,
        `CREATE INDEX IF NOT EXISTS ${TABLE}_expires ON ${TABLE} (expires_at) WHERE expires_at IS NOT NULL`,
      ],
      // This store runs on SQLite alone; the PostgreSQL store declares its own steps.
      postgres: [],
    },
  ],
};

/** Record fields and their columns: the only identifiers that ever reach SQL. */
export const COLUMNS = {
  tenant: 'tenant',
  action: 'action',
  key: 'key',
  state: 'state',
  fingerprint: 'fingerprint',
  fence: 'fence',
  attempts: 'attempts',
  leaseUntil: 'lease_until',
  result: 'result',
  traceId: 'trace_id',
  createdAt: 'created_at',
  updatedAt: 'updated_at',
  completedAt: 'completed_at',
  expiresAt: 'expires_at',
} as const;

type Field = keyof typeof COLUMNS;
const FIELDS = Object.keys(COLUMNS) as Field[];
const SELECT_LIST = FIELDS.map((f) => (COLUMNS[f] === f ? f : `${COLUMNS[f]} AS ${f}`)).join(', ');
const ID = 'tenant = @tenant AND action = @action AND key = @key';

/** Reads one record by id, columns aliased to record fields. */
export const SELECT = `SELECT ${SELECT_LIST} FROM ${TABLE} WHERE ${ID}`;

/** Inserts a record unless its id exists; the primary key decides. */
export const INSERT = `INSERT INTO ${TABLE} (${FIELDS.map((f) => COLUMNS[f]).join(', ')})
  VALUES (${FIELDS.map((f) => `@${f}`).join(', ')}) ON CONFLICT DO NOTHING`;

/** Deletes up to @limit expired records that no one holds and no one must still decide. */
export const PURGE = `DELETE FROM ${TABLE} WHERE (tenant, action, key) IN (
  SELECT tenant, action, key FROM ${TABLE}
  WHERE expires_at IS NOT NULL AND expires_at <= @now AND state <> 'unknown'
    AND (state <> 'in_progress' OR lease_until <= @now)
  LIMIT @limit)`;

/** A conditional update for one patch shape; parameters are the patch fields, the id and `e_*` expectations. */
export function conditionalUpdate(patch: RecordPatch, expect: Expectation): string {
  const sets = Object.keys(patch).map((f) => {
    const column = COLUMNS[f as Field];
    if (!column || f === 'tenant' || f === 'action' || f === 'key') throw new Error(`not a record field: ${f}`);
    return `${column} = @${f}`;
  });
  const states = expect.states.map((_, i) => `@e_state${i}`).join(', ');
  const lease = 'leaseUntil' in expect ? ' AND lease_until IS @e_lease' : '';
  return `UPDATE ${TABLE} SET ${sets.join(', ')} WHERE ${ID} AND fence = @e_fence AND state IN (${states})${lease}`;
}

/** The cache key of the statement `conditionalUpdate` builds for this shape. */
export function updateShape(patch: RecordPatch, expect: Expectation): string {
  return `${Object.keys(patch).join(',')}|${expect.states.length}|${'leaseUntil' in expect ? 'L' : ''}`;
}
