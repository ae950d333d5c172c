import { type Migrations, migrate } from '../db/migrate.js';
import type { Db } from '../db/types.js';
import type { ClaimScope, Statement, WorkTable } from '../work/index.js';

/** The flow tables as the first version created them (adopted as version 1). */
const FIRST_TABLES = [
  `CREATE TABLE IF NOT EXISTS oncely_flows (
    workflow_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    biz_id TEXT NOT NULL,
    input TEXT NOT NULL,
    input_hash TEXT NOT NULL,
    status TEXT NOT NULL,
    result TEXT,
    error TEXT,
    runs INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT,
    lease_until BIGINT,
    wake_at BIGINT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
  )`,
  `CREATE INDEX IF NOT EXISTS oncely_flows_due ON oncely_flows (status, wake_at)`,
  `CREATE TABLE IF NOT EXISTS oncely_flow_steps (
    workflow_id TEXT NOT NULL,
    step_id TEXT NOT NULL,
    status TEXT NOT NULL,
    result TEXT,
    error TEXT,
    attempts INTEGER NOT NULL,
    started_at BIGINT NOT NULL,
    completed_at BIGINT,
    PRIMARY KEY (workflow_id, step_id)
  )`,
  `CREATE TABLE IF NOT EXISTS oncely_flow_signals (
    workflow_id TEXT NOT NULL,
    signal_id TEXT NOT NULL,
    name TEXT NOT NULL,
    payload TEXT NOT NULL,
    received_at BIGINT NOT NULL,
    PRIMARY KEY (workflow_id, signal_id)
  )`,
];

// The claim's fence, replacing the owner's id: a process that claims its own flow again (it
// stalled past its lease) must not let its older run write.
const ADD_FENCE = 'ALTER TABLE oncely_flows ADD COLUMN fence BIGINT NOT NULL DEFAULT 0';

/**
 * The indexes of retention and the admin listing (retention-sql.ts, admin-lists.ts): finished
 * flows by their last update (partial: a flow enters it when it ends; led by the status, or SQLite's
 * planner without statistics takes oncely_flows_due for it), and every flow newest
 * first, of all statuses or one (whole: the listing's status is a bound value).
 */
const AGE_INDEXES = [
  `CREATE INDEX IF NOT EXISTS oncely_flows_finished ON oncely_flows (status, updated_at)
    WHERE status IN ('completed', 'failed', 'cancelled')`,
  'CREATE INDEX IF NOT EXISTS oncely_flows_created ON oncely_flows (created_at, workflow_id)',
  'CREATE INDEX IF NOT EXISTS oncely_flows_status ON oncely_flows (status, created_at, workflow_id)',
];

// The flow's claim count when a step's outcome was written: a step stored by a run before the
// flow's last one was answered from its memo on the later runs (the dashboard labels it memoized).
// Null on rows written before this version.
const ADD_STEP_RUN = 'ALTER TABLE oncely_flow_steps ADD COLUMN run INTEGER';

/**
 * Signals numbered by delivery (sql.ts insertSignal): waits took the n-th signal by `received_at`,
 * the delivering process's clock, so a process whose clock was behind sorted its signal before one
 * delivered earlier, and a wait took a signal an earlier wait had. Signals stored before this
 * version are numbered in the order those waits read them (received_at, then signal_id), so a
 * wait that took one keeps the same one. Unique per flow: two numberings of one flow cannot both commit.
 */
const SIGNAL_SEQ = [
  'ALTER TABLE oncely_flow_signals ADD COLUMN seq BIGINT',
  `UPDATE oncely_flow_signals SET seq = (SELECT COUNT(*) FROM oncely_flow_signals s
    WHERE s.workflow_id = oncely_flow_signals.workflow_id AND (s.received_at < oncely_flow_signals.received_at
      OR (s.received_at = oncely_flow_signals.received_at AND s.signal_id <= oncely_flow_signals.signal_id)))`,
  'CREATE UNIQUE INDEX IF NOT EXISTS oncely_flow_signals_seq ON oncely_flow_signals (workflow_id, seq)',
];

// The intent's trace id, from the execution that started the flow: its runs and steps carry it.
const ADD_TRACE_ID = 'ALTER TABLE oncely_flows ADD COLUMN trace_id TEXT';

/** The flows' versioned tables. */
export const flowMigrations: Migrations = {
  component: 'flows',
  steps: [
    { version: 1, sqlite: FIRST_TABLES, postgres: FIRST_TABLES },
    { version: 2, sqlite: ADD_FENCE, postgres: ADD_FENCE },
    { version: 3, sqlite: AGE_INDEXES, postgres: AGE_INDEXES },
    { version: 4, sqlite: ADD_STEP_RUN, postgres: ADD_STEP_RUN },
    { version: 5, sqlite: SIGNAL_SEQ, postgres: SIGNAL_SEQ },
    { version: 6, sqlite: ADD_TRACE_ID, postgres: ADD_TRACE_ID },
  ],
};

/** Creates or upgrades the flow tables; several processes may call it at once. */
export function migrateFlowTables(db: Db): Promise<void> {
  return migrate(db, flowMigrations);
}

/** Flow runs as claimed work: `running` while a worker holds one; `runs` counts the claims. */
export const FLOW_WORK: WorkTable = {
  table: 'oncely_flows',
  key: ['workflow_id'],
  held: 'running',
  pending: 'pending',
  dead: 'failed',
  attempts: 'runs',
  returning: ['name', 'input', 'trace_id'],
  order: 'updated_at',
  touched: 'updated_at',
};

/** Flows of these names that may run now: pending ones, and waiting ones whose time came. */
export const runnable = (names: readonly string[], now: number): ClaimScope => ({
  scope: { text: `name IN (${names.map(() => '?').join(', ')})`, values: [...names] },
  ready: { text: "status = 'pending' OR (status = 'waiting' AND wake_at <= ?)", values: [now] },
});

/** A flow just started, claimed to run at once. */
export const JUST_STARTED: Statement = { text: "status = 'pending'", values: [] };
