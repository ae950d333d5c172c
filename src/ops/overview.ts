/**
 * What the dashboard's overview counts: records by state, events by status, flows by status,
 * approvals by status, over the whole database. Tables of components the database never migrated
 * (flows, agent) count nothing.
 */
import type { Sql } from '../db/types.js';
import { hasTable } from './admin-lists.js';

/** Counts by state or status of each table oncely keeps work in. */
export interface Overview {
  records: Record<string, number>;
  events: Record<string, number>;
  flows: Record<string, number>;
  approvals: Record<string, number>;
}

// The state indexes of these tables make each GROUP BY a scan of one column, not of the rows' data.
const COUNTS = [
  ['records', 'oncely_records', 'state'],
  ['events', 'oncely_events', 'status'],
  ['flows', 'oncely_flows', 'status'],
  ['approvals', 'oncely_approvals', 'status'],
] as const;

/** The counts of every table that exists, read one table at a time (no table is locked for the others). */
export async function overview(sql: Sql): Promise<Overview> {
  const counts: Overview = { records: {}, events: {}, flows: {}, approvals: {} };
  for (const [name, table, column] of COUNTS) {
    if (!(await hasTable(sql, table))) continue;
    const rows = await sql.all<{ state: string; n: number | string }>(
      `SELECT ${column} AS state, COUNT(*) AS n FROM ${table} GROUP BY ${column}`,
    );
    for (const row of rows) counts[name][row.state] = Number(row.n);
  }
  return counts;
}
