/**
 * The SQL of the event queue and the shapes of its rows, one place for both dialects. Table names are unqualified: on
 * PostgreSQL the connection's search_path picks the schema. Times are epoch milliseconds.
 */
import type { Migrations } from '../db/migrate.js';
import type { ClaimScope, Statement, WorkTable } from '../work/index.js';
import { totalsTable } from './totals.js';

type Dialect = 'sqlite' | 'postgres';

/** Statuses of a stored event. Duplicates are never rows: they are only counted. */
export type EventStatus = 'pending' | 'processing' | 'waiting' | 'applied' | 'stale' | 'dead' | 'no_consumer';

/** The tables as the first version created them (adopted as version 1); each statement runs on its own. */
function firstTables(dialect: Dialect): string[] {
  const big = dialect === 'postgres' ? 'BIGINT' : 'INTEGER';
  return [
    `CREATE TABLE IF NOT EXISTS oncely_events (
      source TEXT NOT NULL,
      event_id TEXT NOT NULL,
      type TEXT NOT NULL,
      payload TEXT NOT NULL,
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

// Rows stored before body_hash keep NULL and are compared by their payload instead.
const ADD_BODY_HASH = 'ALTER TABLE oncely_events ADD COLUMN body_hash TEXT';
// The claim's fence: attempts alone would repeat once a replay resets them to 0.
const ADD_FENCE = 'ALTER TABLE oncely_events ADD COLUMN fence BIGINT NOT NULL DEFAULT 0';

/**
 * The indexes of retention and the admin listing (retention-sql.ts, admin-lists.ts), so neither
 * scans the table. The purge's are partial (a row enters them once it finishes or dies) and lead
 * with the status, so SQLite's planner without statistics prefers them to other indexes on the
 * status; the dead letters' order gets one too, replacing the dead index it covers. The listing's
 * newest-first index is whole, and serves a listing of one status too (it skips the rest), and of
 * one source on PostgreSQL (SQLite sorts the source's rows from the primary key). No whole index leads with the status: SQLite would take it for the claim (an equality on
 * the status, then a sort of every open event) instead of walking the open index in order. None
 * leads with the source: PostgreSQL took one for key lookups of a source its statistics did not
 * know, reading every row of that source (3x slower claims and completions, bare).
 */
const AGE_INDEXES = [
  `CREATE INDEX IF NOT EXISTS oncely_events_finished ON oncely_events (status, updated_at)
    WHERE status IN ('applied', 'stale', 'no_consumer')`,
  `CREATE INDEX IF NOT EXISTS oncely_events_died ON oncely_events (status, updated_at)
    WHERE status = 'dead'`,
  `CREATE INDEX IF NOT EXISTS oncely_events_dead_letters ON oncely_events (status, received_at, source, event_id)
    WHERE status = 'dead'`,
  'DROP INDEX IF EXISTS oncely_events_dead',
  'CREATE INDEX IF NOT EXISTS oncely_events_received ON oncely_events (received_at, source, event_id)',
];

/**
 * Prerequisites (a consumer's `requires`): `waits` counts the checks that found it unmet (the
 * backoff's exponent: attempts count failures only), `wait_from` opens the window again on a replay
 * (null: the receipt), and an ordered event that waited keeps its aggregate and version, so a later
 * version of that aggregate waits behind it instead of overtaking. Waiting rows stay out of the
 * claim's index (a backlog of them would be read by every claim): the due ones are made pending by
 * `dueWaits`, on an index of their own; the aggregate index holds only rows that waited.
 */
const WAITING = [
  'ALTER TABLE oncely_events ADD COLUMN waits INTEGER NOT NULL DEFAULT 0',
  'ALTER TABLE oncely_events ADD COLUMN wait_from BIGINT',
  'ALTER TABLE oncely_events ADD COLUMN wait_aggregate TEXT',
  'ALTER TABLE oncely_events ADD COLUMN wait_version BIGINT',
  `CREATE INDEX IF NOT EXISTS oncely_events_waiting_due ON oncely_events (next_attempt_at) WHERE status = 'waiting'`,
  `CREATE INDEX IF NOT EXISTS oncely_events_waiting ON oncely_events (wait_aggregate, wait_version)
    WHERE wait_aggregate IS NOT NULL`,
];

/** The event queue's versioned tables. */
const ADD_TRACE_ID = 'ALTER TABLE oncely_events ADD COLUMN trace_id TEXT';

export const eventMigrations: Migrations = {
  component: 'events',
  steps: [
    { version: 1, sqlite: firstTables('sqlite'), postgres: firstTables('postgres') },
    // Tables created since body_hash was added have it already: their CREATE TABLE had it.
    {
      version: 2,
      sqlite: ADD_BODY_HASH,
      postgres: ADD_BODY_HASH,
      adds: { table: 'oncely_events', column: 'body_hash' },
    },
    { version: 3, sqlite: ADD_FENCE, postgres: ADD_FENCE },
    { version: 4, sqlite: intoTotals('sqlite'), postgres: intoTotals('postgres') },
    { version: 5, sqlite: AGE_INDEXES, postgres: AGE_INDEXES },
    { version: 6, sqlite: WAITING, postgres: WAITING },
    // The intent's trace id, from the sender's headers or the enqueuing handler: its consumer runs under it.
    { version: 7, sqlite: ADD_TRACE_ID, postgres: ADD_TRACE_ID },
  ],
};

/**
 * The host's totals table, with the event counters it replaces moved in: their rows knew only the
 * outcome, so they keep an empty source and type.
 */
function intoTotals(dialect: Dialect): string[] {
  return [
    totalsTable(dialect),
    `INSERT INTO oncely_totals (metric, labels, shard, value)
      SELECT 'oncely_events_total', '["","","' || outcome || '"]', shard, count FROM oncely_event_counters`,
    'DROP TABLE oncely_event_counters',
  ];
}

/** Events as claimed work: `processing` while a worker holds one. */
export const EVENT_WORK: WorkTable = {
  table: 'oncely_events',
  key: ['source', 'event_id'],
  held: 'processing',
  pending: 'pending',
  dead: 'dead',
  attempts: 'attempts',
  returning: ['type', 'payload', 'received_at', 'waits', 'wait_from', 'wait_aggregate', 'trace_id'],
  order: 'received_at',
  touched: 'updated_at',
  reclaimNote: { column: 'last_error', text: 'lease expired: the worker holding the event stopped' },
};

/**
 * What a claim takes: pending events whose retry time came (and, by the work module, processing
 * ones whose worker let the lease run out); the scope is the open-events index's condition.
 */
export const claimable = (now: number): ClaimScope => ({
  scope: { text: "status IN ('pending', 'processing')", values: [] },
  ready: { text: "status = 'pending' AND next_attempt_at <= ?", values: [now] },
});

/**
 * Waiting events whose next check came, made pending so a claim takes them. SQLite is told the
 * index: without statistics its planner takes the status index and reads every waiting row.
 */
export const dueWaits = (dialect: Dialect, now: number): Statement => ({
  text: `UPDATE oncely_events${dialect === 'sqlite' ? ' INDEXED BY oncely_events_waiting_due' : ''}
  SET status = 'pending' WHERE status = 'waiting' AND next_attempt_at <= ?`,
  values: [now],
});

/** Stores an event unless (source, event_id) is stored; `now` is when it is received and due. */
export const insertEvent = (
  source: string,
  eventId: string,
  type: string,
  payload: string,
  bodyHash: string,
  now: number,
  traceId: string | null = null,
): Statement => ({
  text: `INSERT INTO oncely_events
  (source, event_id, type, payload, body_hash, status, attempts, next_attempt_at, received_at, updated_at, trace_id)
  VALUES (?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?, ?)
  ON CONFLICT (source, event_id) DO NOTHING`,
  values: [source, eventId, type, payload, bodyHash, now, now, now, traceId],
});

/** What a duplicate is compared with; the payload only for rows stored before body_hash. */
export const readBodyHash = (source: string, eventId: string): Statement => ({
  text: `SELECT type, body_hash, CASE WHEN body_hash IS NULL THEN payload END AS payload
  FROM oncely_events WHERE source = ? AND event_id = ?`,
  values: [source, eventId],
});

/** Stores several events in one statement, each unless (source, event_id) is stored; answers the ids it inserted. */
export const insertEvents = (
  source: string,
  events: readonly { id: string; type: string; payload: string; hash: string; traceId: string | null }[],
  now: number,
): Statement => ({
  text: `INSERT INTO oncely_events
  (source, event_id, type, payload, body_hash, status, attempts, next_attempt_at, received_at, updated_at, trace_id)
  VALUES ${events.map(() => "(?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?, ?)").join(', ')}
  ON CONFLICT (source, event_id) DO NOTHING RETURNING event_id`,
  values: events.flatMap((e) => [source, e.id, e.type, e.payload, e.hash, now, now, now, e.traceId]),
});

/** The stored type and body hash (or payload, for rows stored before body_hash) of several events of a source. */
export const readBodyHashes = (source: string, eventIds: readonly string[]): Statement => ({
  text: `SELECT event_id, type, body_hash, CASE WHEN body_hash IS NULL THEN payload END AS payload
  FROM oncely_events WHERE source = ? AND event_id IN (${eventIds.map(() => '?').join(', ')})`,
  values: [source, ...eventIds],
});

/** A claimed row as the claim returns it. */
export interface ClaimedRow {
  source: string;
  event_id: string;
  type: string;
  payload: string;
  received_at: number | string;
  waits: number | string;
  wait_from: number | string | null;
  wait_aggregate: string | null;
  trace_id: string | null;
}

/** The aggregate's version row, created empty when missing. */
export const ensureVersion = (aggregate: string): Statement => ({
  text: `INSERT INTO oncely_event_versions (aggregate, version) VALUES (?, NULL)
  ON CONFLICT (aggregate) DO NOTHING`,
  values: [aggregate],
});

/** The aggregate's version; PostgreSQL locks the row so one aggregate's events apply one at a time. */
export const readVersion = (dialect: Dialect, aggregate: string): Statement => ({
  text: `SELECT version FROM oncely_event_versions WHERE aggregate = ?${dialect === 'postgres' ? ' FOR UPDATE' : ''}`,
  values: [aggregate],
});

/** Sets the aggregate's version once an event of it applied. */
export const writeVersion = (version: number, aggregate: string): Statement => ({
  text: 'UPDATE oncely_event_versions SET version = ? WHERE aggregate = ?',
  values: [version, aggregate],
});

/**
 * The lowest and highest versions of `aggregate` held back by a wait (waiting, or claimed or
 * retrying since it waited) that are newer than `stored`, besides the event itself: an event of a
 * higher version waits behind the lowest, and one applied wakes the rest.
 */
export const heldVersions = (aggregate: string, stored: number | null, source: string, eventId: string): Statement => ({
  text: `SELECT MIN(wait_version) AS earliest, MAX(wait_version) AS latest FROM oncely_events
  WHERE wait_aggregate = ? AND wait_version > ? AND status IN ('pending', 'processing', 'waiting')
  AND NOT (source = ? AND event_id = ?)`,
  values: [aggregate, stored ?? Number.MIN_SAFE_INTEGER, source, eventId],
});

/** Makes the waiting events of `aggregate` newer than `version` pending now: what they waited behind has settled. */
export const wakeLater = (aggregate: string, version: number, now: number): Statement => ({
  text: `UPDATE oncely_events SET status = 'pending', next_attempt_at = ?
  WHERE wait_aggregate = ? AND wait_version > ? AND status = 'waiting'`,
  values: [now, aggregate, version],
});

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

/** Dead letters in the order they arrived. */
export const listDead = (): Statement => ({
  text: `SELECT source, event_id, type, attempts, last_error, received_at, updated_at
  FROM oncely_events WHERE status = 'dead' ORDER BY received_at, source, event_id`,
  values: [],
});

// A replayed event's prerequisites get a new window from now, and it waits behind nothing it waited behind.
const REPLAY_DEAD = `UPDATE oncely_events SET status = 'pending', attempts = 0, next_attempt_at = ?, updated_at = ?,
  waits = 0, wait_from = ?, wait_aggregate = NULL, wait_version = NULL
  WHERE status = 'dead'`;
// What the replay counts by.
const REPLAYED = 'RETURNING source, type';

/** Every dead letter back to pending, its attempts from 0; returns the source and type of each. */
export const replayAllDead = (now: number): Statement => ({
  text: `${REPLAY_DEAD} ${REPLAYED}`,
  values: [now, now, now],
});

/** One dead letter back to pending, its attempts from 0; returns its source and type. */
export const replayOneDead = (source: string, eventId: string, now: number): Statement => ({
  text: `${REPLAY_DEAD} AND source = ? AND event_id = ? ${REPLAYED}`,
  values: [now, now, now, source, eventId],
});

/** One stored event, as `EventQueue.get` returns it. */
export interface StoredEvent {
  source: string;
  eventId: string;
  type: string;
  data: unknown;
  status: EventStatus;
  attempts: number;
  /** Checks of the consumer's `requires` that found it unmet (README "Prerequisites"). */
  waits: number;
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
    waits: Number(r.waits),
    nextAttemptAt: Number(r.next_attempt_at),
    leaseUntil: r.lease_until === null ? null : Number(r.lease_until),
    lastError: r.last_error === null ? null : String(r.last_error),
    receivedAt: Number(r.received_at),
    updatedAt: Number(r.updated_at),
  };
}

export const readEvent = (source: string, eventId: string): Statement => ({
  text: `SELECT source, event_id, type, payload, status, attempts, waits, next_attempt_at, lease_until,
  last_error, received_at, updated_at FROM oncely_events WHERE source = ? AND event_id = ?`,
  values: [source, eventId],
});

/** Events not yet settled, and the earliest time one of them may be claimed; waiting ones are parked, not counted. */
export const openEvents = (): Statement => ({
  text: `SELECT COUNT(*) AS open,
  MIN(CASE WHEN status = 'pending' THEN next_attempt_at ELSE lease_until END) AS next_at
  FROM oncely_events WHERE status IN ('pending', 'processing')`,
  values: [],
});
