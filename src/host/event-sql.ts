/**
 * The SQL of the event queue and the shapes of its rows, one place for both dialects. Table names are unqualified: on
 * PostgreSQL the connection's search_path picks the schema. Times are epoch milliseconds.
 */
type Dialect = 'sqlite' | 'postgres';

/** Statuses of a stored event. Duplicates are never rows: they are only counted. */
export type EventStatus = 'pending' | 'processing' | 'applied' | 'stale' | 'dead' | 'no_consumer';

/** The tables, created if missing; each statement runs on its own. */
export function createTables(dialect: Dialect): string[] {
  const big = dialect === 'postgres' ? 'BIGINT' : 'INTEGER';
  return [
    `CREATE TABLE IF NOT EXISTS oncely_events (
      source TEXT NOT NULL,
      event_id TEXT NOT NULL,
      type TEXT NOT NULL,
      payload TEXT NOT NULL,
      body_hash TEXT,
      status TEXT NOT NULL,
      attempts INTEGER NOT NULL DEFAULT 0,
      next_attempt_at ${big} NOT NULL,
      lease_until ${big},
      last_error TEXT,
      received_at ${big} NOT NULL,
      updated_at ${big} NOT NULL,
      PRIMARY KEY (source, event_id)
    )`,
    // Only the rows a claim looks at: finished events do not grow this index.
    `CREATE INDEX IF NOT EXISTS oncely_events_open ON oncely_events (received_at)
      WHERE status IN ('pending', 'processing')`,
    `CREATE INDEX IF NOT EXISTS oncely_events_dead ON oncely_events (received_at) WHERE status = 'dead'`,
    `CREATE TABLE IF NOT EXISTS oncely_event_versions (
      aggregate TEXT PRIMARY KEY,
      version ${big}
    )`,
    `CREATE TABLE IF NOT EXISTS oncely_event_counters (
      outcome TEXT NOT NULL,
      shard INTEGER NOT NULL,
      count ${big} NOT NULL,
      PRIMARY KEY (outcome, shard)
    )`,
  ];
}

/**
 * Whether oncely_events has its body_hash column (added after the first version; rows stored
 * before keep NULL and are compared by their payload instead). No row means it must be added.
 */
export function bodyHashColumn(dialect: Dialect): string {
  return dialect === 'postgres'
    ? "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass('oncely_events') AND attname = 'body_hash' AND NOT attisdropped"
    : "SELECT name FROM pragma_table_info('oncely_events') WHERE name = 'body_hash'";
}

export const addBodyHash = 'ALTER TABLE oncely_events ADD COLUMN body_hash TEXT';

/** Serializes concurrent migrations of several PostgreSQL processes (IF NOT EXISTS alone races), per schema. */
export const migrationLock = "SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.oncely_events'))";

/**
 * Whether every object exists already (PostgreSQL). Checked first because CREATE INDEX IF NOT
 * EXISTS still takes a lock on its table that waits for every open consumer transaction, and
 * queues every later event statement behind it.
 */
export const tablesExist = `SELECT to_regclass('oncely_events') IS NOT NULL AND to_regclass('oncely_events_open') IS NOT NULL
  AND to_regclass('oncely_events_dead') IS NOT NULL AND to_regclass('oncely_event_versions') IS NOT NULL
  AND to_regclass('oncely_event_counters') IS NOT NULL
  AND EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('oncely_events') AND attname = 'body_hash' AND NOT attisdropped) AS ready`;

/** Params: source, event_id, type, payload, body_hash, now (next_attempt_at), now (received_at), now (updated_at). */
export const insertEvent = `INSERT INTO oncely_events
  (source, event_id, type, payload, body_hash, status, attempts, next_attempt_at, received_at, updated_at)
  VALUES (?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?)
  ON CONFLICT (source, event_id) DO NOTHING`;

/** What a duplicate is compared with; the payload only for rows stored before body_hash. Params: source, event_id. */
export const readBodyHash = `SELECT type, body_hash, CASE WHEN body_hash IS NULL THEN payload END AS payload
  FROM oncely_events WHERE source = ? AND event_id = ?`;

/** Params: outcome, shard. */
export const countOutcome = `INSERT INTO oncely_event_counters (outcome, shard, count) VALUES (?, ?, 1)
  ON CONFLICT (outcome, shard) DO UPDATE SET count = oncely_event_counters.count + 1`;

export const readCounters = 'SELECT outcome, SUM(count) AS count FROM oncely_event_counters GROUP BY outcome';

/** A claimed row as the claim returns it. */
export interface ClaimedRow {
  source: string;
  event_id: string;
  type: string;
  payload: string;
  attempts: number | string;
  received_at: number | string;
}

/**
 * Claims up to n due events: pending ones whose retry time came, and processing ones whose worker
 * let the lease run out. PostgreSQL skips rows other workers hold; SQLite's write lock serializes.
 * Params: lease_until, now (updated_at), now (next_attempt_at), now (lease_until), n.
 */
export function claimEvents(dialect: Dialect): string {
  return `UPDATE oncely_events SET
      status = 'processing',
      attempts = attempts + 1,
      last_error = CASE WHEN status = 'processing' THEN 'lease expired: the worker holding the event stopped' ELSE last_error END,
      lease_until = ?,
      updated_at = ?
    WHERE (source, event_id) IN (
      SELECT source, event_id FROM oncely_events
      WHERE status IN ('pending', 'processing')
        AND ((status = 'pending' AND next_attempt_at <= ?) OR (status = 'processing' AND lease_until <= ?))
      ORDER BY received_at
      LIMIT ?${dialect === 'postgres' ? ' FOR UPDATE SKIP LOCKED' : ''}
    )
    RETURNING source, event_id, type, payload, attempts, received_at`;
}

/**
 * Fences and locks the claimed row for the processing transaction: no row means another worker
 * reclaimed it. On PostgreSQL the row lock also hides it from claims until this transaction ends.
 * Params: now, source, event_id, attempts.
 */
export const holdEvent = `UPDATE oncely_events SET updated_at = ?
  WHERE source = ? AND event_id = ? AND status = 'processing' AND attempts = ?`;

/** Ends a claim, clearing last_error: an applied event shows no failure of an earlier attempt. Params: status, now, source, event_id, attempts. */
export const finishEvent = `UPDATE oncely_events SET status = ?, lease_until = NULL, last_error = NULL, updated_at = ?
  WHERE source = ? AND event_id = ? AND status = 'processing' AND attempts = ?`;

/** Ends a failed claim. Params: status, next_attempt_at, last_error, now, source, event_id, attempts. */
export const failEvent = `UPDATE oncely_events SET status = ?, next_attempt_at = ?, lease_until = NULL, last_error = ?, updated_at = ?
  WHERE source = ? AND event_id = ? AND status = 'processing' AND attempts = ?`;

/** Params: aggregate. */
export const ensureVersion = `INSERT INTO oncely_event_versions (aggregate, version) VALUES (?, NULL)
  ON CONFLICT (aggregate) DO NOTHING`;

/** Params: aggregate. PostgreSQL locks the row so one aggregate's events apply one at a time. */
export function readVersion(dialect: Dialect): string {
  return `SELECT version FROM oncely_event_versions WHERE aggregate = ?${dialect === 'postgres' ? ' FOR UPDATE' : ''}`;
}

/** Params: version, aggregate. */
export const writeVersion = 'UPDATE oncely_event_versions SET version = ? WHERE aggregate = ?';

/** An event that used up its attempts. `id` is `<source>/<eventId>` (a source never contains "/"). */
export interface DeadLetter {
  id: string;
  source: string;
  eventId: string;
  type: string;
  attempts: number;
  lastError: string | null;
  receivedAt: number;
  updatedAt: number;
}

// PostgreSQL returns BIGINT as text: every number goes through Number().
export function toDeadLetter(r: Record<string, unknown>): DeadLetter {
  return {
    id: `${r.source}/${r.event_id}`,
    source: String(r.source),
    eventId: String(r.event_id),
    type: String(r.type),
    attempts: Number(r.attempts),
    lastError: r.last_error === null ? null : String(r.last_error),
    receivedAt: Number(r.received_at),
    updatedAt: Number(r.updated_at),
  };
}

export const listDead = `SELECT source, event_id, type, attempts, last_error, received_at, updated_at
  FROM oncely_events WHERE status = 'dead' ORDER BY received_at, source, event_id`;

/** Params: now, now. */
export const replayAllDead = `UPDATE oncely_events SET status = 'pending', attempts = 0, next_attempt_at = ?, updated_at = ?
  WHERE status = 'dead'`;

/** Params: now, now, source, event_id. */
export const replayOneDead = `${replayAllDead} AND source = ? AND event_id = ?`;

/** One stored event, as `EventQueue.get` returns it. */
export interface StoredEvent {
  source: string;
  eventId: string;
  type: string;
  data: unknown;
  status: EventStatus;
  attempts: number;
  nextAttemptAt: number;
  leaseUntil: number | null;
  lastError: string | null;
  receivedAt: number;
  updatedAt: number;
}

export function toStoredEvent(r: Record<string, unknown>): StoredEvent {
  return {
    source: String(r.source),
    eventId: String(r.event_id),
    type: String(r.type),
    data: JSON.parse(String(r.payload)),
    status: r.status as EventStatus,
    attempts: Number(r.attempts),
    nextAttemptAt: Number(r.next_attempt_at),
    leaseUntil: r.lease_until === null ? null : Number(r.lease_until),
    lastError: r.last_error === null ? null : String(r.last_error),
    receivedAt: Number(r.received_at),
    updatedAt: Number(r.updated_at),
  };
}

/** Params: source, event_id. */
export const readEvent = `SELECT source, event_id, type, payload, status, attempts, next_attempt_at, lease_until,
  last_error, received_at, updated_at FROM oncely_events WHERE source = ? AND event_id = ?`;

/** Events not yet settled, and the earliest time one of them may be claimed. */
export const openEvents = `SELECT COUNT(*) AS open,
  MIN(CASE WHEN status = 'pending' THEN next_attempt_at ELSE lease_until END) AS next_at
  FROM oncely_events WHERE status IN ('pending', 'processing')`;
