import { InvalidArgumentError } from '../core/errors.js';
import type { RecordId, RecordState, Settlement, StoredRecord } from '../core/record.js';
import { compareIds } from '../core/record-batch.js';
import type { Expectation, RecordPatch, RecordQuery } from '../store.js';

/** A statement ready for mysql2's `query(text, values)` (`?` placeholders, filled in by the client). */
export interface Query {
  text: string;
  values: unknown[];
}

/** Where the records live: validated identifiers, quoted once here. */
export interface Names {
  /** The database given, or undefined for the connection's own. */
  database: string | undefined;
  table: string;
  /** `` `database`.`table` `` or `` `table` `` */
  records: string;
  /** The migration ledger beside the records. */
  ledger: string;
}

const IDENTIFIER = /^[a-z_][a-z0-9_]{0,63}$/;

/** Validates the database and table names and builds the quoted names every statement uses. */
export function names(database: string | undefined, table: string): Names {
  for (const [what, value] of [
    ['database', database],
    ['table', table],
  ] as const) {
    if (value === undefined && what === 'database') continue;
    if (typeof value !== 'string' || !IDENTIFIER.test(value))
      throw new InvalidArgumentError(
        `mysql ${what} must be a lowercase identifier matching ${IDENTIFIER}, got ${JSON.stringify(value)}`,
      );
  }
  const inDatabase = (name: string) => (database === undefined ? `\`${name}\`` : `\`${database}\`.\`${name}\``);
  return { database, table, records: inDatabase(table), ledger: inDatabase('oncely_component_migrations') };
}

/**
 * A row as mysql2 returns it: the id columns are VARBINARY (byte-exact keys: no collation folds
 * case or ignores trailing spaces), so they arrive as Buffers.
 */
export interface RecordRow {
  tenant: Buffer | string;
  action: Buffer | string;
  key: Buffer | string;
  state: string;
  fingerprint: string;
  fence: number | string;
  attempts: number | string;
  lease_until: number | string | null;
  result: string | null;
  trace_id: string;
  created_at: number | string;
  updated_at: number | string;
  completed_at: number | string | null;
  expires_at: number | string | null;
  settlement: string | null;
}

const text = (value: Buffer | string): string => (typeof value === 'string' ? value : value.toString('utf8'));
const nullableNumber = (value: number | string | null): number | null => (value === null ? null : Number(value));

/** The id of a row (its id columns are bytes). */
export function rowId(row: Pick<RecordRow, 'tenant' | 'action' | 'key'>): RecordId {
  return { tenant: text(row.tenant), action: text(row.action), key: text(row.key) };
}

/** Converts a row to a record. */
export function toRecord(row: RecordRow): StoredRecord {
  const record: StoredRecord = {
    tenant: text(row.tenant),
    action: text(row.action),
    key: text(row.key),
    state: row.state as RecordState,
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

/** Fields a patch may set, with their columns: the only names SQL is built from besides the id. */
const PATCHABLE = [
  ['state', 'state'],
  ['fingerprint', 'fingerprint'],
  ['fence', 'fence'],
  ['attempts', 'attempts'],
  ['leaseUntil', 'lease_until'],
  ['result', 'result'],
  ['traceId', 'trace_id'],
  ['createdAt', 'created_at'],
  ['updatedAt', 'updated_at'],
  ['completedAt', 'completed_at'],
  ['expiresAt', 'expires_at'],
  ['settlement', 'settlement'],
] as const satisfies readonly (readonly [keyof RecordPatch, string])[];

/** Every record field in column order. */
const FIELDS = [
  ['tenant', 'tenant'],
  ['action', 'action'],
  ['key', 'key'],
  ...PATCHABLE,
] as const satisfies readonly (readonly [keyof StoredRecord, string])[];

const TIME_COLUMNS: ReadonlySet<string> = new Set([
  'lease_until',
  'created_at',
  'updated_at',
  'completed_at',
  'expires_at',
]);

const COLUMNS = FIELDS.map(([, column]) => `\`${column}\``).join(', ');
const SELECTED = FIELDS.map(([, column]) => `r.\`${column}\``).join(', ');

/**
 * The database's clock in epoch ms, in UTC whatever the session's time zone. Leases and expiries
 * are measured by it (see WriteOptions). MySQL reads it once per statement, so every row a
 * statement writes gets the same now.
 */
const CLOCK = "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)";

/**
 * The clock read once into a session variable (`setNow`), for a script's write that would read it
 * once per row and time: the same value, without computing it again for each. Only where the
 * statements share one connection, in one script.
 */
export const NOW = '@oncely_now';
export const setNow: Query = { text: `SET ${NOW} = ${CLOCK}`, values: [] };

/** A field's value as a parameter: a settlement as JSON text, null for none (or one removed). */
const param = (field: string, value: unknown): unknown =>
  field === 'settlement' ? (value ? JSON.stringify(value) : null) : value;

/**
 * `(tenant = ? AND action = ? AND key IN (?, ...)) OR ...`, one term per tenant and action: ranges
 * on the primary key, one per id.
 */
function idsWhere(ids: readonly RecordId[], values: unknown[]): string {
  const groups = new Map<string, { tenant: string; action: string; keys: string[] }>();
  for (const id of ids) {
    const at = JSON.stringify([id.tenant, id.action]);
    const group = groups.get(at);
    if (group) group.keys.push(id.key);
    else groups.set(at, { tenant: id.tenant, action: id.action, keys: [id.key] });
  }
  return [...groups.values()]
    .map(({ tenant, action, keys }) => {
      values.push(tenant, action, ...keys);
      const key = keys.length === 1 ? 'r.`key` = ?' : `r.\`key\` IN (${keys.map(() => '?').join(', ')})`;
      return `(r.\`tenant\` = ? AND r.\`action\` = ? AND ${key})`;
    })
    .join(' OR ');
}

/**
 * Inserts records (distinct ids, in the order given) unless their id exists, each row marked as
 * written by `token` at the statement's clock. Duplicates are left as they are (ON DUPLICATE KEY
 * with a no-op, not INSERT IGNORE, which would also turn a value too long into a silent
 * truncation). `relative`: times are ms from the statement's clock.
 */
export function insertMany(
  n: Names,
  records: readonly StoredRecord[],
  relative: boolean,
  token: Buffer,
  now: string = CLOCK,
): Query {
  const values: unknown[] = [];
  const row = `(${FIELDS.map(([, column]) => (relative && TIME_COLUMNS.has(column) ? `${now} + ?` : '?')).join(', ')}, ?, ${now})`;
  for (const record of records) {
    for (const [field] of FIELDS) values.push(param(field, record[field]));
    values.push(token);
  }
  return {
    text: `INSERT INTO ${n.records} (${COLUMNS}, \`written_by\`, \`written_at\`) VALUES ${records.map(() => row).join(', ')}
ON DUPLICATE KEY UPDATE \`fence\` = \`fence\``,
    values,
  };
}

/**
 * Reads the records of some ids, each with whether `token` wrote it last, when it was written,
 * and the clock's `now`. `locking`: in a caller's transaction, read the latest committed rows (a
 * locking read), not the transaction's snapshot, which predates rows our insert found as duplicates.
 */
export function selectMany(n: Names, ids: readonly RecordId[], token: Buffer | null, locking: boolean): Query {
  const values: unknown[] = [token];
  const where = idsWhere(ids, values);
  return {
    text: `SELECT ${SELECTED}, r.\`written_by\` = ? AS mine, r.\`written_at\`, ${CLOCK} AS now FROM ${n.records} r${locking ? ' FORCE INDEX (PRIMARY)' : ''} WHERE ${where}${locking ? ' FOR UPDATE' : ''}`,
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

/** The patch's fields as a bit mask over PATCHABLE, checked against it; fields set to undefined are left alone. */
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

/**
 * Applies many conditional writes (distinct ids) in one UPDATE per tenant and action (one for a
 * usual batch), each finding its rows by primary key, `key IN (...)`: a field every write of the
 * statement sets alike is one assignment; one that differs, and each row's expectation, pick the
 * row's own value by `CASE r.key`. MySQL has no UPDATE ... RETURNING, so each row written is
 * marked with `token` and the statement's clock, and `writtenBy` reads back which (in the same
 * transaction, which holds their locks).
 */
export function updateMany(n: Names, items: readonly UpdateItem[], token: Buffer, now: string = CLOCK): Query[] {
  // Rows are locked in primary key order within a statement, statements in the same order:
  // batches in flight together wait for each other instead of deadlocking.
  const sorted = [...items].sort((a, b) => compareIds(a.id, b.id));
  const groups: UpdateItem[][] = [];
  for (const item of sorted) {
    const last = groups[groups.length - 1]?.[0];
    if (last && last.id.tenant === item.id.tenant && last.id.action === item.id.action)
      groups[groups.length - 1]?.push(item);
    else groups.push([item]);
  }
  return groups.map((group) => updateGroup(n, group, token, now));
}

/** What a write expects of its row, as SQL over `r` with its values. */
function expectation(item: UpdateItem): { text: string; values: unknown[] } {
  const { fence, states, leaseUntil } = item.expect;
  const values: unknown[] = [fence, ...states];
  // No state expected: nothing matches.
  const inStates = states.length > 0 ? `r.\`state\` IN (${states.map(() => '?').join(', ')})` : 'FALSE';
  let text = `r.\`fence\` = ? AND ${inStates}`;
  if (leaseUntil !== undefined) {
    text += ' AND r.`lease_until` <=> ?';
    values.push(leaseUntil);
  }
  return { text, values };
}

/** One value of a write as SQL (a time the write gives relative to the clock is counted from it), with its parameter. */
function assigned(
  item: UpdateItem,
  field: keyof RecordPatch,
  column: string,
  now: string,
): { text: string; value: unknown } {
  const value = param(field, item.patch[field] ?? null);
  return { text: item.relative && TIME_COLUMNS.has(column) ? `? + ${now}` : '?', value };
}

/** The UPDATE of writes with one tenant and action, in key order (see updateMany). */
function updateGroup(n: Names, group: readonly UpdateItem[], token: Buffer, now: string): Query {
  const values: unknown[] = [];
  const first = group[0] as UpdateItem;
  const masks = group.map((item) => patchMask(item.patch));
  const sets: string[] = [];
  PATCHABLE.forEach(([field, column], bit) => {
    const setting = group.filter((_, i) => ((masks[i] as number) & (1 << bit)) !== 0);
    if (setting.length === 0) return;
    const each = setting.map((item) => assigned(item, field, column, now));
    const head = each[0] as { text: string; value: unknown };
    if (setting.length === group.length && each.every((a) => a.text === head.text && a.value === head.value)) {
      sets.push(`r.\`${column}\` = ${head.text}`);
      values.push(head.value);
      return;
    }
    const whens = setting.map((item, i) => {
      const a = each[i] as { text: string; value: unknown };
      values.push(item.id.key, a.value);
      return `WHEN ? THEN ${a.text}`;
    });
    sets.push(`r.\`${column}\` = CASE r.\`key\` ${whens.join(' ')} ELSE r.\`${column}\` END`);
  });
  values.push(token);
  values.push(first.id.tenant, first.id.action, ...group.map((item) => item.id.key));
  const expected = group.map(expectation);
  const alike = expected.every(
    (e) =>
      e.text === expected[0]?.text &&
      e.values.length === expected[0].values.length &&
      e.values.every((v, i) => v === expected[0]?.values[i]),
  );
  let condition: string;
  if (alike) {
    condition = (expected[0] as { text: string }).text;
    values.push(...(expected[0] as { values: unknown[] }).values);
  } else {
    const whens = group.map((item, i) => {
      const e = expected[i] as { text: string; values: unknown[] };
      values.push(item.id.key, ...e.values);
      return `WHEN ? THEN ${e.text}`;
    });
    condition = `CASE r.\`key\` ${whens.join(' ')} ELSE FALSE END`;
  }
  return {
    // Found (so locked) by primary key: on a small table the optimizer would rather scan it, and
    // a scanning UPDATE locks every row it reads.
    text: `UPDATE ${n.records} r FORCE INDEX (PRIMARY)
SET ${sets.join(', ')}, r.\`written_by\` = ?, r.\`written_at\` = ${now}
WHERE r.\`tenant\` = ? AND r.\`action\` = ? AND r.\`key\` IN (${group.map(() => '?').join(', ')})
  AND ${condition}`,
    values,
  };
}

/** The ids among `ids` that `token` wrote last, with the clock it wrote at. */
export function writtenBy(n: Names, ids: readonly RecordId[], token: Buffer): Query {
  const values: unknown[] = [];
  const where = idsWhere(ids, values);
  values.push(token);
  return {
    text: `SELECT r.\`tenant\`, r.\`action\`, r.\`key\`, r.\`written_at\` FROM ${n.records} r WHERE (${where}) AND r.\`written_by\` = ?`,
    values,
  };
}

/**
 * Deletes up to `limit` expired records, never unknown ones or live claims. Expired means by `now`
 * and by the database's clock both: a caller whose clock runs ahead never deletes a claim whose
 * lease the database still counts as live.
 */
export function purgeExpired(n: Names, now: number, limit: number): Query {
  return {
    text: `DELETE FROM ${n.records} WHERE \`expires_at\` <= LEAST(?, ${CLOCK}) AND \`state\` <> 'unknown'
  AND (\`state\` <> 'in_progress' OR \`lease_until\` <= LEAST(?, ${CLOCK})) LIMIT ?`,
    values: [now, now, limit],
  };
}

const STATES: readonly RecordState[] = ['in_progress', 'succeeded', 'failed', 'released', 'unknown'];

/**
 * One page of records matching the filters in id order (the primary key's, or the state index's,
 * which InnoDB orders by state then primary key), after the id `after` when given; one row more
 * than `limit` says a page follows.
 */
export function listRecords(n: Names, query: RecordQuery, after: RecordId | undefined): Query {
  const values: unknown[] = [];
  const where: string[] = [];
  const is = (condition: string, ...given: unknown[]) => {
    values.push(...given);
    where.push(condition);
  };
  if (query.state !== undefined) {
    if (!STATES.includes(query.state)) throw new InvalidArgumentError(`state must be one of ${STATES.join(', ')}`);
    is('r.`state` = ?', query.state);
  }
  if (query.tenant !== undefined) is('r.`tenant` = ?', query.tenant);
  if (query.action !== undefined) is('r.`action` = ?', query.action);
  if (query.updatedBefore !== undefined) is('r.`updated_at` <= ?', query.updatedBefore);
  // Spelled out rather than a row comparison, which not every MySQL and MariaDB turns into an index range.
  if (after)
    is(
      '(r.`tenant` > ? OR (r.`tenant` = ? AND (r.`action` > ? OR (r.`action` = ? AND r.`key` > ?))))',
      after.tenant,
      after.tenant,
      after.action,
      after.action,
      after.key,
    );
  values.push(query.limit + 1);
  const filter = where.length > 0 ? ` WHERE ${where.join(' AND ')}` : '';
  return {
    text: `SELECT ${SELECTED} FROM ${n.records} r${filter} ORDER BY r.\`tenant\`, r.\`action\`, r.\`key\` LIMIT ?`,
    values,
  };
}

/** One step of the records table: statements run in order, once per database. */
export interface MysqlStep {
  version: number;
  statements: readonly string[];
}

/**
 * The records table's versions, the records v2 schema of the other SQL stores (settlement, state
 * index) from the first. Ids are VARBINARY, compared byte for byte: 128 + 128 + 255 characters of
 * up to 4 bytes make a 2,044-byte key, inside InnoDB's 3,072. MySQL has no partial index: the state
 * index holds every record (InnoDB appends the primary key, so it also gives the id order). Append
 * new versions, never edit applied ones.
 */
export function recordSteps(n: Names): readonly MysqlStep[] {
  const text = 'CHARACTER SET utf8mb4 COLLATE utf8mb4_bin';
  return [
    {
      version: 1,
      statements: [
        `CREATE TABLE IF NOT EXISTS ${n.records} (
  \`tenant\` VARBINARY(512) NOT NULL,
  \`action\` VARBINARY(512) NOT NULL,
  \`key\` VARBINARY(1020) NOT NULL,
  \`state\` VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  \`fingerprint\` VARCHAR(255) ${text} NOT NULL,
  \`fence\` BIGINT NOT NULL,
  \`attempts\` INT NOT NULL,
  \`lease_until\` BIGINT NULL,
  \`result\` LONGTEXT ${text} NULL,
  \`trace_id\` VARCHAR(255) ${text} NOT NULL,
  \`created_at\` BIGINT NOT NULL,
  \`updated_at\` BIGINT NOT NULL,
  \`completed_at\` BIGINT NULL,
  \`expires_at\` BIGINT NULL,
  \`settlement\` MEDIUMTEXT ${text} NULL,
  -- The last write's token and the clock it wrote at: what an insert or an update reads back to
  -- learn which rows it wrote, MySQL having no RETURNING.
  \`written_by\` BINARY(16) NULL,
  \`written_at\` BIGINT NULL,
  PRIMARY KEY (\`tenant\`, \`action\`, \`key\`),
  KEY \`${n.table}_expires_at\` (\`expires_at\`),
  KEY \`${n.table}_state\` (\`state\`),
  CONSTRAINT \`${n.table}_state_valid\` CHECK (\`state\` IN ('in_progress', 'succeeded', 'failed', 'released', 'unknown'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
      ],
    },
  ];
}

/** The records table's component in the ledger: `records`, or `records:<table>` for another table. */
export const component = (n: Names): string => (n.table === 'oncely_records' ? 'records' : `records:${n.table}`);

/** The ledger of the one migration convention (db/migrate.ts), in MySQL's types. */
export const createLedger = (n: Names): string => `CREATE TABLE IF NOT EXISTS ${n.ledger} (
  \`component\` VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  \`version\` INT NOT NULL,
  \`applied_at\` BIGINT NOT NULL,
  PRIMARY KEY (\`component\`, \`version\`)
) ENGINE=InnoDB`;
