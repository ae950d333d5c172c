/** The duplicate scan's table and statements, one place for both dialects. Times are epoch milliseconds. */
import type { Migrations } from '../db/migrate.js';
import { quoteIdent as quote, type TableSchema } from '../host/schema.js';

const FINDINGS_V1 = `CREATE TABLE IF NOT EXISTS oncely_duplicate_findings (
  table_name TEXT NOT NULL,
  business_key TEXT NOT NULL,
  count BIGINT NOT NULL,
  first_seen BIGINT NOT NULL,
  last_seen BIGINT NOT NULL,
  rows_first_at BIGINT,
  rows_last_at BIGINT,
  counted BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (table_name, business_key)
)`;

/** The findings table's versioned steps (component 'duplicates'). */
export const duplicatesMigrations: Migrations = {
  component: 'duplicates',
  steps: [{ version: 1, sqlite: FINDINGS_V1, postgres: FINDINGS_V1 }],
};

/** An effect table as the scan reads it: SQL names only, each read from the database's catalog. */
export interface ScanTarget {
  /** The table's SQL name (the findings' `table_name` and the counter's `action`). */
  table: string;
  /** The table as statements name it: quoted, with its PostgreSQL schema. */
  from: string;
  /** The business key's SQL column names, in declared order. */
  columns: readonly string[];
  /** The host's `created_at` stamp column when the table has one. */
  stamp: string | null;
  /** The table as read from the catalog: how a key's values are decoded to their JS shape. */
  schema: TableSchema;
}

/** What a statement needs: its text and its `?` values. */
export interface Statement {
  text: string;
  values: unknown[];
}

/**
 * Groups of more than one row with the same business key, in key order, at most `limit`, after
 * `after` (the last group of the previous page, raw as the driver read it). Rows with a NULL in
 * the key are left out, as a unique index leaves them unconstrained.
 */
export function duplicateGroups(target: ScanTarget, limit: number, after: readonly unknown[] | null): Statement {
  const columns = target.columns.map(quote);
  const list = columns.join(', ');
  const stamp = target.stamp === null ? 'NULL' : quote(target.stamp);
  const where = columns.map((c) => `${c} IS NOT NULL`);
  if (after) where.push(`(${list}) > (${columns.map(() => '?').join(', ')})`);
  return {
    text: `SELECT ${list}, COUNT(*) AS oncely_count, MIN(${stamp}) AS oncely_first_at, MAX(${stamp}) AS oncely_last_at
      FROM ${target.from} WHERE ${where.join(' AND ')}
      GROUP BY ${list} HAVING COUNT(*) > 1 ORDER BY ${list} LIMIT ${limit}`,
    values: after ? [...after] : [],
  };
}

/** Records a group seen now: a new finding, or the latest count and times of a known one. */
export function upsertFinding(
  table: string,
  key: string,
  count: number,
  now: number,
  rowsFirstAt: number | null,
  rowsLastAt: number | null,
): Statement {
  return {
    text: `INSERT INTO oncely_duplicate_findings
        (table_name, business_key, count, first_seen, last_seen, rows_first_at, rows_last_at, counted)
      VALUES (?, ?, ?, ?, ?, ?, ?, 0)
      ON CONFLICT (table_name, business_key) DO UPDATE SET count = excluded.count, last_seen = excluded.last_seen,
        rows_first_at = excluded.rows_first_at, rows_last_at = excluded.rows_last_at
      RETURNING ${FINDING_COLUMNS}`,
    values: [table, key, count, now, now, rowsFirstAt, rowsLastAt],
  };
}

/** A finding's columns, in the order `DuplicateFinding` names them. */
export const FINDING_COLUMNS =
  'table_name, business_key, count, first_seen, last_seen, rows_first_at, rows_last_at, counted';

/** Moves `counted` from what this transaction read to `to`; changes no row if another scan moved it first. */
export function markCounted(table: string, key: string, from: number, to: number): Statement {
  return {
    text: 'UPDATE oncely_duplicate_findings SET counted = ? WHERE table_name = ? AND business_key = ? AND counted = ?',
    values: [to, table, key, from],
  };
}

/** One page of findings in (table_name, business_key) order, after a cursor's position. */
export function findingsPage(table: string | undefined, limit: number, after: [string, string] | null): Statement {
  const where: string[] = [];
  const values: unknown[] = [];
  if (table !== undefined) {
    where.push('table_name = ?');
    values.push(table);
  }
  if (after) {
    where.push('(table_name > ? OR (table_name = ? AND business_key > ?))');
    values.push(after[0], after[0], after[1]);
  }
  return {
    text: `SELECT ${FINDING_COLUMNS} FROM oncely_duplicate_findings${where.length > 0 ? ` WHERE ${where.join(' AND ')}` : ''}
      ORDER BY table_name, business_key LIMIT ${limit}`,
    values,
  };
}
