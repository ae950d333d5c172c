import { InvalidArgumentError } from '../core/errors.js';
import type { RecordId, RecordState, Settlement, StoredRecord } from '../core/record.js';
import type { Migrations } from '../db/migrate.js';
import type { Expectation, RecordPatch, RecordQuery } from '../store.js';

/** A statement ready for `query(text, values)`. */
export interface Query {
  text: string;
  values: unknown[];
}

/** Where the records live: validated identifiers, quoted once here. */
export interface Names {
  schema: string;
  table: string;
  /** `"schema"."table"` */
  records: string;
  /** The store's own ledger of older releases: `"schema"."migrations"`, `"schema"."<table>_migrations"` for another table. */
  formerLedger: string;
}

const IDENTIFIER = /^[a-z_][a-z0-9_]{0,62}$/;

/** Validates the schema and table names and builds the quoted names every statement uses. */
export function names(schema: string, table: string): Names {
  for (const [what, value] of [
    ['schema', schema],
    ['table', table],
  ] as const) {
    if (typeof value !== 'string' || !IDENTIFIER.test(value))
      throw new InvalidArgumentError(
        `postgres ${what} must be a lowercase identifier matching ${IDENTIFIER}, got ${JSON.stringify(value)}`,
      );
  }
  const former = table === 'records' ? 'migrations' : `${table}_migrations`;
  return { schema, table, records: `"${schema}"."${table}"`, formerLedger: `"${schema}"."${former}"` };
}

/** A row as pg returns it: bigint columns arrive as strings unless the pool parses them. */
export interface RecordRow {
  tenant: string;
  action: string;
  key: string;
  state: string;
  fingerprint: string;
  fence: string | number;
  attempts: string | number;
  lease_until: string | number | null;
  result: string | null;
  trace_id: string;
  created_at: string | number;
  updated_at: string | number;
  completed_at: string | number | null;
  expires_at: string | number | null;
  /** JSON text (selected as text: a pool's own jsonb parser never sees it). */
  settlement: string | null;
}

const nullableNumber = (value: string | number | null): number | null => (value === null ? null : Number(value));

/** Converts a row to a record. */
export function toRecord(row: RecordRow): StoredRecord {
  const record: StoredRecord = {
    tenant: row.tenant,
    action: row.action,
    key: row.key,
    state: row.state as StoredRecord['state'],
    fingerprint: row.fingerprint,
    fence: Number(row.fence),
    attempts: Number(row.attempts),
    leaseUntil: nullableNumber(row.lease_until),
    result: row.result,
    traceId: row.trace_id,
    createdAt: Number(row.created_at),
    updatedAt: Number(row.updated_at),
    completedAt: nullableNumber(row.completed_at),
    expiresAt: nullableNumber(row.expires_at),
  };
  // Absent, not undefined, when never settled.
  if (row.settlement !== null) record.settlement = JSON.parse(row.settlement) as Settlement;
  return record;
}

type Column = readonly [field: string, column: string, type: 'text' | 'bigint' | 'int' | 'jsonb'];

/**
 * Fields a patch may set, with column and SQL type: the only names SQL is built from. Position i
 * is bit 1 << i of a batched update's mask.
 */
const PATCHABLE = [
  ['state', 'state', 'text'],
  ['fingerprint', 'fingerprint', 'text'],
  ['fence', 'fence', 'bigint'],
  ['attempts', 'attempts', 'int'],
  ['leaseUntil', 'lease_until', 'bigint'],
  ['result', 'result', 'text'],
  ['traceId', 'trace_id', 'text'],
  ['createdAt', 'created_at', 'bigint'],
  ['updatedAt', 'updated_at', 'bigint'],
  ['completedAt', 'completed_at', 'bigint'],
  ['expiresAt', 'expires_at', 'bigint'],
  ['settlement', 'settlement', 'jsonb'],
] as const satisfies readonly (Column & readonly [keyof RecordPatch, string, string])[];

/** Every record field in column order. */
const FIELDS = [
  ['tenant', 'tenant', 'text'],
  ['action', 'action', 'text'],
  ['key', 'key', 'text'],
  ...PATCHABLE,
] as const satisfies readonly (Column & readonly [keyof StoredRecord, string, string])[];

const COLUMNS = FIELDS.map(([, column]) => column).join(', ');
const SELECTED = FIELDS.map(([, column, type]) =>
  type === 'jsonb' ? `r.${column}::text AS ${column}` : `r.${column}`,
).join(', ');

/** A field's value as a parameter: a settlement as JSON text, null for none (or one removed). */
const param = (field: string, value: unknown): unknown =>
  field === 'settlement' ? (value ? JSON.stringify(value) : null) : value;

/**
 * The database's clock in epoch ms. Leases and expiries are measured by it (see WriteOptions), so
 * processes whose own clocks disagree agree on whose lease is live. clock_timestamp(), not now():
 * inside a caller's long transaction now() is when that transaction began.
 */
const CLOCK = '(extract(epoch FROM clock_timestamp()) * 1000)::bigint';

/** Columns holding times: in a relative write each value is ms from the clock's now. */
const TIME_COLUMNS: ReadonlySet<string> = new Set([
  'lease_until',
  'created_at',
  'updated_at',
  'completed_at',
  'expires_at',
]);

/** The expression a relative write stores for a time value `value` (null stays null). */
const fromNow = (value: string, column: string, shift: string): string =>
  TIME_COLUMNS.has(column) ? `${value} + ${shift}` : value;

/** The patch's fields, checked against the whitelist; fields set to undefined are left alone. */
export function patchMask(patch: RecordPatch): number {
  let mask = 0;
  for (const [field, value] of Object.entries(patch)) {
    if (value === undefined) continue;
    const bit = PATCHABLE.findIndex(([name]) => name === field);
    if (bit < 0) throw new InvalidArgumentError(`a record patch cannot set "${field}"`);
    mask |= 1 << bit;
  }
  return mask;
}

// What an insert returns per inserted row: its id, and the clock's `now` at the write. A relative
// record was created at exactly that now (created_at = now + 0); an absolute one reads the clock.
const INSERTED = `tenant, action, key, CASE WHEN $${FIELDS.length + 1}::boolean THEN created_at ELSE ${CLOCK} END AS now`;

/**
 * Inserts one record unless its id exists; a returned row (its id and the clock's `now`) means it
 * was inserted. `relative`: its times are ms from the clock's now (see WriteOptions).
 */
export function insertOne(n: Names, record: StoredRecord, relative: boolean): Query {
  const shift = relative ? 'c.now' : '0';
  const params = FIELDS.map(([, column, type], i) => fromNow(`$${i + 1}::${type}`, column, shift)).join(', ');
  return {
    text: `INSERT INTO ${n.records} (${COLUMNS}) SELECT ${params} FROM (SELECT ${CLOCK} AS now) c
ON CONFLICT (tenant, action, key) DO NOTHING RETURNING ${INSERTED}`,
    values: [...FIELDS.map(([field]) => param(field, record[field])), relative],
  };
}

/** Inserts many records (distinct ids) in array order; returns the ids that were inserted, and the clock's `now`. */
export function insertMany(n: Names, records: readonly StoredRecord[], relative: boolean): Query {
  const arrays = FIELDS.map(([, , type], i) => `$${i + 1}::${type}[]`).join(', ');
  const shift = relative ? 'c.now' : '0';
  const selected = FIELDS.map(([, column]) => fromNow(`v.${column}`, column, shift)).join(', ');
  return {
    // Array order is kept so every process inserts overlapping ids in the same order (no deadlock).
    // Relative and absolute records are batched apart (see the store), so `$n` says which these are.
    text: `INSERT INTO ${n.records} (${COLUMNS})
SELECT ${selected} FROM (SELECT ${CLOCK} AS now) c, unnest(${arrays}) WITH ORDINALITY AS v(${COLUMNS}, i) ORDER BY i
ON CONFLICT (tenant, action, key) DO NOTHING RETURNING ${INSERTED}`,
    values: [...FIELDS.map(([field]) => records.map((record) => param(field, record[field]))), relative],
  };
}

/** Reads one record, with the clock's `now` (what its lease and expiry are compared with). */
export function selectOne(n: Names, id: RecordId): Query {
  return {
    text: `SELECT ${SELECTED}, ${CLOCK} AS now FROM ${n.records} r WHERE r.tenant = $1 AND r.action = $2 AND r.key = $3`,
    values: [id.tenant, id.action, id.key],
  };
}

/** Reads the records of many ids, each row with the clock's `now`; missing ones return no row. */
export function selectMany(n: Names, ids: readonly RecordId[]): Query {
  return {
    text: `SELECT ${SELECTED}, ${CLOCK} AS now FROM ${n.records} r
JOIN unnest($1::text[], $2::text[], $3::text[]) AS v(tenant, action, key)
ON r.tenant = v.tenant AND r.action = v.action AND r.key = v.key`,
    values: [ids.map((id) => id.tenant), ids.map((id) => id.action), ids.map((id) => id.key)],
  };
}

/**
 * Applies one patch if the record matches the expectation; a returned row (the clock's `now` the
 * write used) means it did. `relative`: the patch's times are ms from that now (see WriteOptions).
 */
export function updateOne(n: Names, id: RecordId, expect: Expectation, patch: RecordPatch, relative: boolean): Query {
  const mask = patchMask(patch);
  const values: unknown[] = [id.tenant, id.action, id.key, expect.fence, expect.states];
  const sets = PATCHABLE.flatMap(([field, column, type], bit) => {
    if ((mask & (1 << bit)) === 0) return [];
    values.push(param(field, patch[field]));
    return [
      `${column} = ${relative ? fromNow(`$${values.length}::${type}`, column, 'c.now') : `$${values.length}::${type}`}`,
    ];
  });
  // An empty patch is a pure compare: touch nothing, still report whether the row matched.
  if (sets.length === 0) sets.push('fence = r.fence');
  let where = 'r.tenant = $1 AND r.action = $2 AND r.key = $3 AND r.fence = $4 AND r.state = ANY($5::text[])';
  if (expect.leaseUntil !== undefined) {
    values.push(expect.leaseUntil);
    where += ` AND r.lease_until IS NOT DISTINCT FROM $${values.length}::bigint`;
  }
  // The clock is read once for the row: the times it sets and the now it returns are one value.
  return {
    text: `UPDATE ${n.records} r SET ${sets.join(', ')} FROM (SELECT ${CLOCK} AS now) c WHERE ${where} RETURNING c.now`,
    values,
  };
}

/** One conditional write of a batch. */
export interface UpdateItem {
  id: RecordId;
  expect: Expectation;
  patch: RecordPatch;
  /** The patch's times are ms from the clock's now (see WriteOptions). */
  relative: boolean;
}

/**
 * Applies many conditional writes (distinct ids) at once; returns the positions (1-based) that
 * applied, each with the clock's `now` (read once for the statement) its relative times count from.
 */
export function updateMany(n: Names, items: readonly UpdateItem[]): Query {
  const patchArrays = PATCHABLE.map(([, , type], i) => `$${i + 10}::${type}[]`).join(', ');
  const patchColumns = PATCHABLE.map(([, column]) => column).join(', ');
  const shift = 'CASE WHEN v.relative THEN c.now ELSE 0 END';
  // A mask bit per field lets patches of any shape share one statement.
  const sets = PATCHABLE.map(
    ([, column], bit) =>
      `${column} = CASE WHEN v.mask & ${1 << bit} <> 0 THEN ${fromNow(`v.${column}`, column, shift)} ELSE r.${column} END`,
  ).join(',\n  ');
  const values: unknown[] = [
    items.map((u) => u.id.tenant),
    items.map((u) => u.id.action),
    items.map((u) => u.id.key),
    items.map((u) => u.expect.fence),
    items.map((u) => u.expect.states.join(',')),
    items.map((u) => u.expect.leaseUntil !== undefined),
    items.map((u) => u.expect.leaseUntil ?? null),
    items.map((u) => patchMask(u.patch)),
    items.map((u) => u.relative),
    ...PATCHABLE.map(([field]) => items.map((u) => param(field, u.patch[field] ?? null))),
  ];
  return {
    // Rows are locked in key order first, so concurrent batches over the same ids never deadlock.
    text: `WITH c AS (SELECT ${CLOCK} AS now), v AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::boolean[], $7::bigint[], $8::int[], $9::boolean[], ${patchArrays})
  WITH ORDINALITY AS v(tenant, action, key, expect_fence, expect_states, check_lease, expect_lease, mask, relative, ${patchColumns}, i)
), locked AS (
  SELECT r.tenant, r.action, r.key FROM ${n.records} r
  JOIN v ON r.tenant = v.tenant AND r.action = v.action AND r.key = v.key
  ORDER BY r.tenant, r.action, r.key FOR UPDATE OF r
)
UPDATE ${n.records} r SET
  ${sets}
FROM c, v JOIN locked l ON l.tenant = v.tenant AND l.action = v.action AND l.key = v.key
WHERE r.tenant = v.tenant AND r.action = v.action AND r.key = v.key
  AND r.fence = v.expect_fence AND r.state = ANY(string_to_array(v.expect_states, ','))
  AND (NOT v.check_lease OR r.lease_until IS NOT DISTINCT FROM v.expect_lease)
RETURNING v.i, c.now`,
    values,
  };
}

/**
 * Deletes up to `limit` expired records, never unknown ones or live claims; skips rows others hold.
 * Expired means by `now` and by the database's clock both: a caller whose clock runs ahead never
 * deletes a claim whose lease the database still counts as live.
 */
export function purgeExpired(n: Names, now: number, limit: number): Query {
  return {
    // By ctid, so each deletion is one tuple fetch however many records have expired. A row updated
    // since the snapshot has a new ctid (or was excluded when locked): left for the next purge.
    text: `DELETE FROM ${n.records} r WHERE r.ctid = ANY(ARRAY(
  SELECT e.ctid FROM ${n.records} e, (SELECT LEAST($1::bigint, ${CLOCK}) AS now) c
  WHERE e.expires_at <= c.now AND e.state <> 'unknown'
    AND (e.state <> 'in_progress' OR e.lease_until <= c.now)
  LIMIT $2 FOR UPDATE SKIP LOCKED
))`,
    values: [now, limit],
  };
}

/**
 * The records table as a component of the one migration convention (db/migrate.ts), in the
 * schema's `oncely_component_migrations`: `records`, or `records:<table>` for another table, since
 * two tables in one schema must not share a component or the second would never be created.
 * Versions the store's own ledger recorded (releases before the convention) are carried over.
 * Append new versions, never edit applied ones.
 */
export function recordMigrations(n: Names): Migrations {
  return {
    component: n.table === 'records' ? 'records' : `records:${n.table}`,
    formerLedger: n.formerLedger,
    steps: [
      {
        version: 1,
        // This store runs on PostgreSQL alone; the SQLite store declares its own steps.
        sqlite: [],
        postgres: [
          `CREATE TABLE IF NOT EXISTS ${n.records} (
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
          `CREATE INDEX IF NOT EXISTS "${n.table}_expires_at" ON ${n.records} (expires_at) WHERE expires_at IS NOT NULL`,
        ],
      },
      {
        version: 2,
        sqlite: [],
        // Who settled a record, and an index that lists the records an operator looks for in id
        // order; partial, as on SQLite: finished records leave it, so the hot path barely pays for it.
        postgres: [
          `ALTER TABLE ${n.records} ADD COLUMN IF NOT EXISTS settlement jsonb`,
          `CREATE INDEX IF NOT EXISTS "${n.table}_state" ON ${n.records} (state, tenant, action, key)
  WHERE state IN ('in_progress', 'unknown')`,
        ],
      },
    ],
  };
}

/**
 * One page of records matching the filters in id order (the primary key's, or the state index's
 * for unknown and in_progress records), after the id `after` when given; one row more than `limit` says a page follows.
 */
export function listRecords(n: Names, query: RecordQuery, after: RecordId | undefined): Query {
  const values: unknown[] = [];
  const where: string[] = [];
  const is = (condition: string, value: unknown) => {
    values.push(value);
    where.push(condition.replace('?', `$${values.length}`));
  };
  // A literal (the column's CHECK allows only the five states): the partial index serves a condition whose value the planner sees.
  if (query.state !== undefined) where.push(`r.state = '${stateLiteral(query.state)}'`);
  if (query.tenant !== undefined) is('r.tenant = ?', query.tenant);
  if (query.action !== undefined) is('r.action = ?', query.action);
  if (query.updatedBefore !== undefined) is('r.updated_at <= ?::bigint', query.updatedBefore);
  if (after) {
    values.push(after.tenant, after.action, after.key);
    const i = values.length;
    where.push(`(r.tenant, r.action, r.key) > ($${i - 2}, $${i - 1}, $${i})`);
  }
  values.push(query.limit + 1);
  const filter = where.length > 0 ? ` WHERE ${where.join(' AND ')}` : '';
  return {
    text: `SELECT ${SELECTED} FROM ${n.records} r${filter} ORDER BY r.tenant, r.action, r.key LIMIT $${values.length}`,
    values,
  };
}

const STATES: readonly RecordState[] = ['in_progress', 'succeeded', 'failed', 'released', 'unknown'];

/** A state checked against the five, so it can be written into SQL. */
function stateLiteral(state: RecordState): RecordState {
  if (!STATES.includes(state)) throw new InvalidArgumentError(`state must be one of ${STATES.join(', ')}`);
  return state;
}

/** Whether the schema exists (creating it when it does needs a privilege a user may lack). */
export function hasSchema(n: Names): Query {
  return { text: 'SELECT to_regnamespace($1) IS NOT NULL AS has_schema', values: [`"${n.schema}"`] };
}

/** Creates the schema. */
export function createSchema(n: Names): Query {
  return { text: `CREATE SCHEMA IF NOT EXISTS "${n.schema}"`, values: [] };
}

/** The connection's search path. */
export function searchPath(): Query {
  return { text: "SELECT current_setting('search_path') AS path", values: [] };
}

/** Sets the connection's search path back to `path`, as searchPath() read it. */
export function setSearchPath(path: string): Query {
  return { text: "SELECT set_config('search_path', $1, false)", values: [path] };
}

/** Puts the schema alone on the connection's search path: the migration ledger and lock are the schema's. */
export function useSchema(n: Names): Query {
  return { text: `SET search_path TO "${n.schema}"`, values: [] };
}
