import { applyDdl } from '../db/ddl.js';
import type { Db } from '../db/types.js';

const DDL = [
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

/** Creates the flow tables if missing; several processes may call it at once. */
export function migrateFlowTables(db: Db): Promise<void> {
  return applyDdl(db, 7346253, DDL);
}
