import { InvalidArgumentError } from '../core/errors.js';
import type { RecordState } from '../core/record.js';
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
    {
      version: 2,
      // Who settled a record (JSON of a Settlement), and an index that lists the records an
      // operator looks for in id order. Partial: a record leaves it when it finishes, so it stays
      // small and the hot path's writes barely pay for it (one over every state cost ~20% more
      // per claim and completion). The OR form is the one SQLite proves `state = 'unknown'` implies.
      sqlite: [
        `ALTER TABLE ${TABLE} ADD COLUMN settlement TEXT`,
        `CREATE INDEX IF NOT EXISTS ${TABLE}_state ON ${TABLE} (state, tenant, action, key)
  WHERE state = 'in_progress' OR state = 'unknown'`,
      ],
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
  // Last: a record read with none drops the field, and deleting an object's last property is cheap.
  settlement: 'settlement',
} as const;

type Field = keyof typeof COLUMNS;
const FIELDS = Object.keys(COLUMNS) as Field[];
// The engine's claims carry no settlement: their insert leaves the column null.
const UNSETTLED = FIELDS.filter((f) => f !== 'settlement');
const SELECT_LIST = FIELDS.map((f) => (COLUMNS[f] === f ? f : `${COLUMNS[f]} AS ${f}`)).join(', ');
const ID = 'tenant = @tenant AND action = @action AND key = @key';

/** Reads one record by id, columns aliased to record fields; `settlement` is its JSON text or null. */
export const SELECT = `SELECT ${SELECT_LIST} FROM ${TABLE} WHERE ${ID}`;

const insertOf = (fields: readonly Field[]) => `INSERT INTO ${TABLE} (${fields.map((f) => COLUMNS[f]).join(', ')})
  VALUES (${fields.map((f) => `@${f}`).join(', ')}) ON CONFLICT DO NOTHING`;

/** Inserts a record without a settlement unless its id exists; the primary key decides. */
export const INSERT = insertOf(UNSETTLED);

/** INSERT for a record that carries a settlement (as JSON text in `@settlement`). */
export const INSERT_SETTLED = insertOf(FIELDS);

/** Deletes up to @limit expired records that no one holds and no one must still decide. */
export const PURGE = `DELETE FROM ${TABLE} WHERE (tenant, action, key) IN (
  SELECT tenant, action, key FROM ${TABLE}
  WHERE expires_at IS NOT NULL AND expires_at <= @now AND state <> 'unknown'
    AND (state <> 'in_progress' OR lease_until <= @now)
  LIMIT @limit)`;

/** A conditional update for one patch shape; parameters are the patch fields, the id and `e_*` expectations. */
export function conditionalUpdate(patch: RecordPatch, expect: Expectation): string {
  const sets = patchFields(patch).map((f) => {
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
  return `${patchFields(patch).join(',')}|${expect.states.length}|${'leaseUntil' in expect ? 'L' : ''}`;
}

// A field set to undefined is one the patch leaves alone (as the PostgreSQL store reads it), not one set to null.
const patchFields = (patch: RecordPatch): string[] =>
  Object.keys(patch).filter((f) => patch[f as keyof RecordPatch] !== undefined);

/** The filters of a listing, as `list` turns them into SQL: which are given, and whether a cursor follows. */
export interface ListShape {
  /** Inlined as a literal: a partial index is used only for a condition SQLite sees the value of. */
  state: RecordState | undefined;
  tenant: boolean;
  action: boolean;
  updatedBefore: boolean;
  /**
   * The id columns the cursor condition compares (`(tenant, action, key) > (...)`), the ones the
   * filters fix left out so the index range starts at the cursor; none: no cursor condition.
   */
  after: readonly ('tenant' | 'action' | 'key')[];
}

/**
 * One page of records in id order (the primary key's, or the state index's for unknown and
 * in_progress records), from `@c_*` on; parameters `@tenant`, `@action`, `@updatedBefore`,
 * `@c_tenant`, `@c_action`, `@c_key`, `@limit`.
 */
export function listRecords(shape: ListShape): string {
  const where: string[] = [];
  if (shape.state !== undefined) where.push(`state = '${stateLiteral(shape.state)}'`);
  if (shape.tenant) where.push('tenant = @tenant');
  if (shape.action) where.push('action = @action');
  if (shape.updatedBefore) where.push('updated_at <= @updatedBefore');
  if (shape.after.length === 1) where.push(`${shape.after[0]} > @c_${shape.after[0]}`);
  else if (shape.after.length > 1)
    where.push(`(${shape.after.join(', ')}) > (${shape.after.map((c) => `@c_${c}`).join(', ')})`);
  const filter = where.length > 0 ? ` WHERE ${where.join(' AND ')}` : '';
  // Named: without statistics SQLite may prefer the primary key's tenant range and filter it.
  const from =
    shape.state === 'unknown' || shape.state === 'in_progress' ? `${TABLE} INDEXED BY ${TABLE}_state` : TABLE;
  return `SELECT ${SELECT_LIST} FROM ${from}${filter} ORDER BY tenant, action, key LIMIT @limit`;
}

const STATES: readonly RecordState[] = ['in_progress', 'succeeded', 'failed', 'released', 'unknown'];

/** A state checked against the five, so it can be written into SQL. */
function stateLiteral(state: RecordState): RecordState {
  if (!STATES.includes(state)) throw new InvalidArgumentError(`state must be one of ${STATES.join(', ')}`);
  return state;
}

/** The cache key of the statement `listRecords` builds for this shape. */
export function listShapeKey(shape: ListShape): string {
  return `${shape.state ?? ''}|${+shape.tenant}${+shape.action}${+shape.updatedBefore}${shape.after.join(',')}`;
}
