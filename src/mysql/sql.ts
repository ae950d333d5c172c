import { InvalidArgumentError } from '../core/errors.js';
import type { RecordId, RecordState, Settlement, StoredRecord } from '../core/record.js';
import type { RecordPatch, RecordQuery } from '../store.js';

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

/** A field's value as a parameter: a settlement as JSON text, null for none (or one removed). */
const param = (field: string, value: unknown): unknown =>
  field === 'settlement' ? (value ? JSON.stringify(value) : null) : value;

/** Checks a patch against the whitelist, so a bad patch fails its caller alone and never a whole batch. */
export function checkPatch(patch: RecordPatch): void {
  for (const [field, value] of Object.entries(patch))
    if (value !== undefined && !PATCHABLE.some(([name]) => name === field))
      throw new InvalidArgumentError(`a record patch cannot set "${field}"`);
}

/** `(tenant = ? AND action = ? AND key = ?) OR ...`: ranges on the primary key, one per id. */
function idsWhere(ids: readonly RecordId[], values: unknown[]): string {
  return ids
    .map((id) => {
      values.push(id.tenant, id.action, id.key);
      return '(r.`tenant` = ? AND r.`action` = ? AND r.`key` = ?)';
    })
    .join(' OR ');
}

/**
 * Inserts records (distinct ids, in the order given) unless their id exists, each row marked with
 * `token`. Duplicates are left as they are (ON DUPLICATE KEY with a no-op, not INSERT IGNORE, which
 * would also turn a value too long into a silent truncation). `relative`: times are ms from the
 * statement's clock.
 */
export function insertMany(n: Names, records: readonly StoredRecord[], relative: boolean, token: Buffer): Query {
  const values: unknown[] = [];
  const row = `(${FIELDS.map(([, column]) => (relative && TIME_COLUMNS.has(column) ? `${CLOCK} + ?` : '?')).join(', ')}, ?)`;
  for (const record of records) {
    for (const [field] of FIELDS) values.push(param(field, record[field]));
    values.push(token);
  }
  return {
    text: `INSERT INTO ${n.records} (${COLUMNS}, \`insert_token\`) VALUES ${records.map(() => row).join(', ')}
ON DUPLICATE KEY UPDATE \`fence\` = \`fence\``,
    values,
  };
}

/**
 * Reads the records of some ids, each with whether `token` inserted it and the clock's `now`.
 * `locking`: in a caller's transaction, read the latest committed rows (a locking read), not the
 * transaction's snapshot, which predates rows our insert found as duplicates.
 */
export function selectMany(n: Names, ids: readonly RecordId[], token: Buffer | null, locking: boolean): Query {
  const values: unknown[] = [token];
  const where = idsWhere(ids, values);
  return {
    text: `SELECT ${SELECTED}, r.\`insert_token\` = ? AS mine, ${CLOCK} AS now FROM ${n.records} r WHERE ${where}${locking ? ' FOR UPDATE' : ''}`,
    values,
  };
}

/** Locks the rows of some ids (in key order, so overlapping batches wait instead of deadlocking) and reads them with the clock's now. */
export function lockMany(n: Names, ids: readonly RecordId[]): Query {
  const values: unknown[] = [];
  const where = idsWhere(ids, values);
  return {
    text: `SELECT ${SELECTED}, ${CLOCK} AS now FROM ${n.records} r WHERE ${where} ORDER BY r.\`tenant\`, r.\`action\`, r.\`key\` FOR UPDATE`,
    values,
  };
}

/**
 * Writes whole records over locked rows of the same ids, in one statement: a derived table of the
 * new values joined on the primary key (portable: no RETURNING, no row constructors of one dialect).
 */
export function writeMany(n: Names, records: readonly StoredRecord[]): Query {
  const values: unknown[] = [];
  const rows = records.map((record, i) => {
    for (const [field] of FIELDS) values.push(param(field, record[field]));
    return i === 0
      ? `SELECT ${FIELDS.map(([, column]) => `? AS \`${column}\``).join(', ')}`
      : `SELECT ${FIELDS.map(() => '?').join(', ')}`;
  });
  const sets = PATCHABLE.map(([, column]) => `r.\`${column}\` = v.\`${column}\``).join(', ');
  return {
    text: `UPDATE ${n.records} r JOIN (${rows.join(' UNION ALL ')}) v
ON r.\`tenant\` = v.\`tenant\` AND r.\`action\` = v.\`action\` AND r.\`key\` = v.\`key\`
SET ${sets}`,
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
  \`insert_token\` BINARY(16) NULL,
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
