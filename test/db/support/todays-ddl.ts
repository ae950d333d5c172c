/**
 * The tables exactly as the code before the migration ledger created them (copied from
 * src/host/event-sql.ts, src/host/outbox.ts, src/flows/tables.ts and src/agent/tables.ts of that
 * version), so the migration test opens a database made by it. Do not edit to follow the code.
 */
type Dialect = 'sqlite' | 'postgres';

/** Events, outbox, flows and agent tables, each statement on its own. */
export function todaysTables(dialect: Dialect): string[] {
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
    `CREATE TABLE IF NOT EXISTS oncely_outbox (
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
)`,
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
    `CREATE TABLE IF NOT EXISTS oncely_approvals (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    tool TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    input TEXT NOT NULL,
    preview TEXT NOT NULL,
    status TEXT NOT NULL,
    requested_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    decided_by TEXT,
    decided_at BIGINT,
    reason TEXT
  )`,
    `CREATE TABLE IF NOT EXISTS oncely_credit_accounts (account TEXT PRIMARY KEY, balance BIGINT NOT NULL)`,
    `CREATE TABLE IF NOT EXISTS oncely_credit_reservations (
    action_id TEXT PRIMARY KEY,
    account TEXT NOT NULL,
    credits BIGINT NOT NULL,
    status TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    settled_at BIGINT,
    life TEXT NOT NULL DEFAULT ''
  )`,
  ];
}

/** The events table of the first release, before body_hash. */
export const LEGACY_EVENTS_BEFORE_BODY_HASH = (dialect: Dialect): string[] => {
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
  ];
};
