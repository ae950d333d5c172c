/**
 * The SQL of retention, one place for both dialects: which rows of each table are past their
 * retention, and the bounded statements that delete them. Times are epoch milliseconds; table
 * names are unqualified (on PostgreSQL the connection's search_path picks the schema).
 */
import type { Statement } from '../work/index.js';

type Dialect = 'sqlite' | 'postgres';

/** A table retention purges, and which of its rows go given the cutoffs (null: none of them). */
export interface PurgeTarget {
  table: string;
  /** The rows past retention: every status not named here is kept whatever its age. */
  where(cutoffs: Cutoffs): Statement | null;
}

/**
 * The oldest time a row of each kind may have and stay; null keeps that kind forever. A row goes
 * when its time is at or before the cutoff.
 */
export interface Cutoffs {
  events: number | null;
  outbox: number | null;
  flows: number | null;
  approvals: number | null;
  reservations: number | null;
  deadLetters: number | null;
  duplicateFindings: number | null;
  adminActions: number | null;
}

/** Joins the parts that apply with OR; null when none does (the table is kept whole). */
function anyOf(...parts: (Statement | null)[]): Statement | null {
  const kept = parts.filter((p): p is Statement => p !== null);
  if (kept.length === 0) return null;
  return { text: kept.map((p) => `(${p.text})`).join(' OR '), values: kept.flatMap((p) => p.values) };
}

const olderThan = (condition: string, column: string, cutoff: number | null): Statement | null =>
  cutoff === null ? null : { text: `${condition} AND ${column} <= ?`, values: [cutoff] };

/**
 * Events: the finished ones (applied, stale, stored with no consumer) by their last update; dead
 * letters only with a deadLetters retention. Pending, processing and waiting rows never match. The
 * oncely_event_versions table is never a target: it orders an aggregate's later events.
 */
export const EVENTS: PurgeTarget = {
  table: 'oncely_events',
  where: (c) =>
    anyOf(
      olderThan("status IN ('applied', 'stale', 'no_consumer')", 'updated_at', c.events),
      olderThan("status = 'dead'", 'updated_at', c.deadLetters),
    ),
};

/** Outbox rows: delivered ones by their delivery; dead ones (next_attempt_at is when they died) with deadLetters. */
export const OUTBOX: PurgeTarget = {
  table: 'oncely_outbox',
  where: (c) =>
    anyOf(
      olderThan("status = 'delivered'", 'delivered_at', c.outbox),
      olderThan("status = 'dead'", 'next_attempt_at', c.deadLetters),
    ),
};

/**
 * Finished flows (completed, cancelled) by their last update; their steps and signals go with them.
 * A failed flow waits for an operator's retry, which reruns only its failed step: it is a dead
 * letter, kept as those are (by deadLetters), since purging its memoized steps would make a later
 * start run every step again.
 */
export const FLOWS: PurgeTarget = {
  table: 'oncely_flows',
  where: (c) => {
    const past = anyOf(
      olderThan("status IN ('completed', 'cancelled')", 'updated_at', c.flows),
      olderThan("status = 'failed'", 'updated_at', c.deadLetters),
    );
    if (!past) return null;
    // Led by the partial index's own condition (oncely_flows_finished) and the latest cutoff, so
    // either planner seeks the index's (status, updated_at) ranges; SQLite's reads a partial index
    // only for a WHERE that names its condition, which the OR of the two retentions does not.
    const latest = Math.max(...[c.flows, c.deadLetters].filter((cut): cut is number => cut !== null));
    return {
      text: `status IN ('completed', 'failed', 'cancelled') AND updated_at <= ? AND (${past.text})`,
      values: [latest, ...past.values],
    };
  },
};

/** The tables whose rows belong to one flow, deleted with it. */
export const FLOW_CHILDREN = ['oncely_flow_steps', 'oncely_flow_signals'] as const;

/** Decided approvals (approved, rejected, expired) by their decision; pending ones stay. */
export const APPROVALS: PurgeTarget = {
  table: 'oncely_approvals',
  where: (c) => olderThan("status IN ('approved', 'rejected', 'expired')", 'decided_at', c.approvals),
};

/** Settled credit reservations (confirmed, released) by their settlement; held ones stay, accounts are never targets. */
export const RESERVATIONS: PurgeTarget = {
  table: 'oncely_credit_reservations',
  where: (c) => olderThan("status IN ('confirmed', 'released')", 'settled_at', c.reservations),
};

/** Residual-duplicate findings no scan has seen since the cutoff (the duplicates were cleaned up). */
export const DUPLICATE_FINDINGS: PurgeTarget = {
  table: 'oncely_duplicate_findings',
  where: (c) => olderThan('1 = 1', 'last_seen', c.duplicateFindings),
};

/** The admin API's audit log, by when each action was taken. */
export const ADMIN_ACTIONS: PurgeTarget = {
  table: 'oncely_admin_actions',
  where: (c) => olderThan('1 = 1', 'at', c.adminActions),
};

/** Every target but records and flows, in the order a pass purges them. */
export const PLAIN_TARGETS: readonly PurgeTarget[] = [
  EVENTS,
  OUTBOX,
  APPROVALS,
  RESERVATIONS,
  DUPLICATE_FINDINGS,
  ADMIN_ACTIONS,
];

/**
 * Deletes at most `limit` rows of `table` matching `where`, by row address so each deletion is
 * one tuple fetch. PostgreSQL locks what it picks and skips rows others hold (a live update or a
 * second purger): a row changed since the pick is checked against `where` again before it goes.
 */
export function deleteBatch(dialect: Dialect, table: string, where: Statement, limit: number): Statement {
  if (dialect === 'sqlite')
    return {
      text: `DELETE FROM ${table} WHERE rowid IN (SELECT rowid FROM ${table} WHERE ${where.text} LIMIT ?)`,
      values: [...where.values, limit],
    };
  return {
    text: `DELETE FROM ${table} WHERE ctid = ANY(ARRAY(
  SELECT ctid FROM ${table} WHERE ${where.text} LIMIT ? FOR UPDATE SKIP LOCKED))`,
    values: [...where.values, limit],
  };
}

/** How many rows of `table` match `where`: what a dry run reports. */
export const countRows = (table: string, where: Statement): Statement => ({
  text: `SELECT COUNT(*) AS n FROM ${table} WHERE ${where.text}`,
  values: where.values,
});

/** Up to `limit` finished flows past retention, locked on PostgreSQL until their batch commits. */
export function pickFlows(dialect: Dialect, where: Statement, limit: number): Statement {
  return {
    text: `SELECT workflow_id FROM oncely_flows WHERE ${where.text} LIMIT ?${dialect === 'postgres' ? ' FOR UPDATE SKIP LOCKED' : ''}`,
    values: [...where.values, limit],
  };
}

/** Deletes the rows of `table` (a flow table) of the given flows: one parameter however many ids. */
export function deleteOfFlows(dialect: Dialect, table: string, ids: readonly string[]): Statement {
  if (dialect === 'sqlite')
    return {
      text: `DELETE FROM ${table} WHERE workflow_id IN (SELECT value FROM json_each(?))`,
      values: [JSON.stringify(ids)],
    };
  return { text: `DELETE FROM ${table} WHERE workflow_id = ANY(?::text[])`, values: [ids] };
}

/** How many rows of a flow child table belong to flows matching `where` (a dry run's figure). */
export const countOfFlows = (table: string, where: Statement): Statement => ({
  text: `SELECT COUNT(*) AS n FROM ${table} WHERE workflow_id IN (SELECT workflow_id FROM oncely_flows WHERE ${where.text})`,
  values: where.values,
});

/** The records table, as the host's record store names it. */
export const RECORDS_TABLE = 'oncely_records';

/**
 * Expired records as the stores' purgeExpired deletes them (never unknown ones or live claims); on
 * PostgreSQL by the earlier of `now` and the database's clock, as the store does.
 */
export function countExpiredRecords(dialect: Dialect, now: number): Statement {
  const at = dialect === 'postgres' ? 'LEAST(?::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)' : '?';
  return {
    text: `SELECT COUNT(*) AS n FROM ${RECORDS_TABLE}
  WHERE expires_at IS NOT NULL AND expires_at <= ${at} AND state <> 'unknown'
    AND (state <> 'in_progress' OR lease_until <= ${at})`,
    values: [now, now],
  };
}

/** Whether `table` exists here: tables of a component this database never migrated are skipped. */
export const tableExists = (dialect: Dialect, table: string): Statement =>
  dialect === 'postgres'
    ? { text: 'SELECT 1 AS present WHERE to_regclass(?) IS NOT NULL', values: [table] }
    : { text: "SELECT 1 AS present FROM sqlite_master WHERE type = 'table' AND name = ?", values: [table] };
