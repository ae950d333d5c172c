import { type Migrations, migrate } from '../db/migrate.js';
import type { Db } from '../db/types.js';

/** Approvals and the credit ledger, on SQLite and PostgreSQL alike, as the first version created them. */
const FIRST_TABLES = [
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

/**
 * The indexes of retention and the admin listings (retention-sql.ts, admin-lists.ts): decided
 * approvals and settled reservations by when (partial: a row enters when it is decided or
 * settled; led by the status, so SQLite's planner prefers them to the status index); approvals newest first, of all statuses or one (whole: the status is a bound value);
 * and the held reservations of an account, which the credits page sums per account.
 */
const AGE_INDEXES = [
  `CREATE INDEX IF NOT EXISTS oncely_approvals_decided ON oncely_approvals (status, decided_at)
    WHERE status IN ('approved', 'rejected', 'expired')`,
  'CREATE INDEX IF NOT EXISTS oncely_approvals_requested ON oncely_approvals (requested_at, id)',
  'CREATE INDEX IF NOT EXISTS oncely_approvals_status ON oncely_approvals (status, requested_at, id)',
  `CREATE INDEX IF NOT EXISTS oncely_credit_reservations_settled ON oncely_credit_reservations (status, settled_at)
    WHERE status IN ('confirmed', 'released')`,
  `CREATE INDEX IF NOT EXISTS oncely_credit_reservations_held ON oncely_credit_reservations (account)
    WHERE status = 'reserved'`,
];

/**
 * One row per action ever charged, kept for good (retention purges settled reservations, never
 * these): the ledger's proof that an action id is charged at most once, whatever the tool's TTL.
 */
const CHARGES = [
  `CREATE TABLE IF NOT EXISTS oncely_credit_charges (
    action_id TEXT PRIMARY KEY,
    account TEXT NOT NULL,
    credits BIGINT NOT NULL,
    charged_at BIGINT NOT NULL
  )`,
];

/**
 * The keys of keyed grants (Credits.grant), per account, kept for good: a top-up retried after
 * any time credits once.
 */
const GRANTS = [
  `CREATE TABLE IF NOT EXISTS oncely_credit_grants (
    account TEXT NOT NULL,
    grant_key TEXT NOT NULL,
    credits BIGINT NOT NULL,
    granted_at BIGINT NOT NULL,
    PRIMARY KEY (account, grant_key)
  )`,
];

/** The agent's versioned tables. */
export const agentMigrations: Migrations = {
  component: 'agent',
  steps: [
    { version: 1, sqlite: FIRST_TABLES, postgres: FIRST_TABLES },
    { version: 2, sqlite: AGE_INDEXES, postgres: AGE_INDEXES },
    { version: 3, sqlite: CHARGES, postgres: CHARGES },
    { version: 4, sqlite: GRANTS, postgres: GRANTS },
  ],
};

/** Creates or upgrades the agent tables; several processes may call it at once. */
export function migrateAgentTables(db: Db): Promise<void> {
  return migrate(db, agentMigrations);
}
