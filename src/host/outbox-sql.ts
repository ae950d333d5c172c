/** The outbox's tables and statements, one place for both dialects. Times are epoch milliseconds. */
import type { Migrations } from '../db/migrate.js';
import type { Statement, WorkTable } from '../work/index.js';
import { totalsTable } from './totals.js';

/** The outbox table as the first version of the host created it (adopted as version 1). */
const OUTBOX_V1 = `CREATE TABLE IF NOT EXISTS oncely_outbox (
  id TEXT PRIMARY KEY,
  topic TEXT NOT NULL,
  payload TEXT NOT NULL,
  status TEXT NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  next_attempt_at BIGINT NOT NULL,
  lease_until BIGINT,
  last_error TEXT,
  created_at BIGINT NOT NULL,
  delivered_at BIGINT
)`;

// The claim's fence: attempts alone would do, but a counter that only ever grows cannot repeat.
const ADD_FENCE = 'ALTER TABLE oncely_outbox ADD COLUMN fence BIGINT NOT NULL DEFAULT 0';

const ADD_TRACE_ID = 'ALTER TABLE oncely_outbox ADD COLUMN trace_id TEXT';

/**
 * Retention's indexes (retention-sql.ts): delivered rows by their delivery, dead ones by when they
 * died. Partial, so pending and delivering rows (the relay's) are in neither.
 */
const AGE_INDEXES = [
  `CREATE INDEX IF NOT EXISTS oncely_outbox_delivered ON oncely_outbox (status, delivered_at)
    WHERE status = 'delivered'`,
  `CREATE INDEX IF NOT EXISTS oncely_outbox_died ON oncely_outbox (status, next_attempt_at)
    WHERE status = 'dead'`,
];

/** The outbox's versioned tables. */
export const outboxMigrations: Migrations = {
  component: 'outbox',
  steps: [
    { version: 1, sqlite: OUTBOX_V1, postgres: OUTBOX_V1 },
    { version: 2, sqlite: ADD_FENCE, postgres: ADD_FENCE },
    // Where deliveries are counted; the events component makes it too (whichever migrates first).
    { version: 3, sqlite: totalsTable('sqlite'), postgres: totalsTable('postgres') },
    { version: 4, sqlite: AGE_INDEXES, postgres: AGE_INDEXES },
    // The trace id of the intent that enqueued the message: its consumers run under it.
    { version: 5, sqlite: ADD_TRACE_ID, postgres: ADD_TRACE_ID },
  ],
};

/** Outbox rows as claimed work: `delivering` while a relay holds one. */
export const OUTBOX_WORK: WorkTable = {
  table: 'oncely_outbox',
  key: ['id'],
  held: 'delivering',
  pending: 'pending',
  dead: 'dead',
  attempts: 'attempts',
  returning: ['topic', 'payload', 'created_at', 'trace_id'],
  order: 'created_at, id',
};

/** A claimed outbox row. */
export interface OutboxRow {
  id: string;
  topic: string;
  payload: string;
  created_at: number | string;
  trace_id: string | null;
}

/** Rows due for delivery now, besides those whose relay let the lease run out. */
export const dueNow = (now: number): Statement => ({
  text: "status = 'pending' AND next_attempt_at <= ?",
  values: [now],
});

/** Writes a message unless its id is written already. */
export const insertMessage = (
  id: string,
  topic: string,
  payload: string,
  now: number,
  traceId: string | null,
): Statement => ({
  text: `INSERT INTO oncely_outbox (id, topic, payload, status, next_attempt_at, created_at, trace_id)
     VALUES (?, ?, ?, 'pending', ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
  values: [id, topic, payload, now, now, traceId],
});
