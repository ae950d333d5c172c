/**
 * The statements of claimed work, as pure functions returning text and values (`?` placeholders on
 * both dialects). Column and table names come from a WorkTable declared in code, never from input.
 */

/** A statement ready for `Sql.all` / `Sql.run`. */
export interface Statement {
  text: string;
  values: unknown[];
}

/**
 * A table of claimable rows. Besides its own columns it has `status`, `lease_until` and `fence`
 * (incremented by every claim, so a holder whose row was claimed again can change nothing);
 * `fail` also needs `next_attempt_at` and `last_error`.
 */
export interface WorkTable {
  table: string;
  /** Its primary key columns. */
  key: readonly string[];
  /** The status of a claimed row. */
  held: string;
  /** The status a failed (retried) or released row goes back to. */
  pending: string;
  /** The status of a row that used up its attempts. */
  dead: string;
  /** The column counting claims (the attempt a holder runs). */
  attempts: string;
  /** Columns a claim returns besides the key, attempts and fence. */
  returning: readonly string[];
  /** ORDER BY of a claim: which due rows go first. */
  order: string;
  /** A column set to now by every write of this module (updated_at), when the table has one. */
  touched?: string;
  /** A text column set when a claim takes a row whose holder let its lease run out. */
  reclaimNote?: { column: string; text: string };
}

/** What a claim takes: rows in `scope` that are `ready` now, or held with a lease run out. */
export interface ClaimScope {
  /** Rows that may be claimed at all (a partial index's condition, the names a worker knows). */
  scope?: Statement;
  /** Rows due now besides held ones whose lease ran out, e.g. `status = 'pending' AND next_attempt_at <= ?`. */
  ready: Statement;
}

/** What every claim sets: held, one more attempt, the next fence, a lease. */
function claimSets(t: WorkTable, now: number, leaseUntil: number) {
  const sets = [`status = ?`, `${t.attempts} = ${t.attempts} + 1`, 'fence = fence + 1', 'lease_until = ?'];
  const values: unknown[] = [t.held, leaseUntil];
  if (t.reclaimNote) {
    const { column } = t.reclaimNote;
    sets.push(`${column} = CASE WHEN status = ? THEN ? ELSE ${column} END`);
    values.push(t.held, t.reclaimNote.text);
  }
  if (t.touched) {
    sets.push(`${t.touched} = ?`);
    values.push(now);
  }
  return { sets, values };
}

/**
 * Claims up to `limit` rows in one statement: PostgreSQL skips rows other workers hold locked;
 * SQLite's write lock serializes the claims of processes sharing the file.
 */
export function claim(
  t: WorkTable,
  dialect: 'sqlite' | 'postgres',
  { scope, ready }: ClaimScope,
  now: number,
  leaseUntil: number,
  limit: number,
): Statement {
  const { sets, values } = claimSets(t, now, leaseUntil);
  const key = t.key.join(', ');
  const where = [`((${ready.text}) OR (status = ? AND lease_until <= ?))`];
  const whereValues = [...ready.values, t.held, now];
  if (scope) {
    where.unshift(`(${scope.text})`);
    whereValues.unshift(...scope.values);
  }
  return {
    text: `UPDATE ${t.table} SET ${sets.join(', ')}
      WHERE (${key}) IN (
        SELECT ${key} FROM ${t.table} WHERE ${where.join(' AND ')}
        ORDER BY ${t.order} LIMIT ?${dialect === 'postgres' ? ' FOR UPDATE SKIP LOCKED' : ''}
      )
      RETURNING ${[...t.key, t.attempts, 'fence', ...t.returning].join(', ')}`,
    values: [...values, ...whereValues, limit],
  };
}

/**
 * Claims one row known by its key, if it is `ready` or held with a lease run out. Without the
 * claim's subquery: a worker taking the row it just started pays one primary-key update.
 */
export function claimRow(
  t: WorkTable,
  key: readonly unknown[],
  ready: Statement,
  now: number,
  leaseUntil: number,
): Statement {
  const { sets, values } = claimSets(t, now, leaseUntil);
  return {
    text: `UPDATE ${t.table} SET ${sets.join(', ')}
      WHERE ${t.key.map((c) => `${c} = ?`).join(' AND ')} AND ((${ready.text}) OR (status = ? AND lease_until <= ?))
      RETURNING ${[...t.key, t.attempts, 'fence', ...t.returning].join(', ')}`,
    values: [...values, ...key, ...ready.values, t.held, now],
  };
}

/** The fenced WHERE every write of a holder ends with: its row, still held, by the same claim. */
function fenced(t: WorkTable, key: readonly unknown[], fence: number): Statement {
  return {
    text: `WHERE ${t.key.map((c) => `${c} = ?`).join(' AND ')} AND status = ? AND fence = ?`,
    values: [...key, t.held, fence],
  };
}

/** A column's new value as SQL on the row itself rather than a bound value. */
export interface Expression {
  sql: string;
}

const isExpression = (value: unknown): value is Expression =>
  typeof value === 'object' && value !== null && typeof (value as Expression).sql === 'string';

function update(
  t: WorkTable,
  set: Record<string, unknown>,
  key: readonly unknown[],
  fence: number,
  now: number,
): Statement {
  const columns = Object.entries({ ...set, ...(t.touched ? { [t.touched]: now } : {}) });
  const where = fenced(t, key, fence);
  // A holder with nothing to set still needs a write: it is the row lock and the fence check.
  const sets =
    columns.length === 0 ? ['fence = fence'] : columns.map(([c, v]) => `${c} = ${isExpression(v) ? v.sql : '?'}`);
  return {
    text: `UPDATE ${t.table} SET ${sets.join(', ')} ${where.text}`,
    values: [...columns.flatMap(([, v]) => (isExpression(v) ? [] : [v])), ...where.values],
  };
}

/** Extends a held lease. */
export const renew = (t: WorkTable, key: readonly unknown[], fence: number, leaseUntil: number, now: number) =>
  update(t, { lease_until: leaseUntil }, key, fence, now);

/**
 * Touches a held row: inside a transaction, this locks it on PostgreSQL until the commit, and
 * answers whether the claim still holds.
 */
export const hold = (t: WorkTable, key: readonly unknown[], fence: number, now: number) =>
  update(t, {}, key, fence, now);

/** Ends a claim with `status` and the table's own columns in `set`. */
export const settle = (
  t: WorkTable,
  key: readonly unknown[],
  fence: number,
  status: string,
  set: Record<string, unknown>,
  now: number,
) => update(t, { status, lease_until: null, ...set }, key, fence, now);

/** Ends a failed claim: due again at `nextAttemptAt`, or dead-lettered. */
export const fail = (
  t: WorkTable,
  key: readonly unknown[],
  fence: number,
  dead: boolean,
  nextAttemptAt: number,
  error: string,
  now: number,
) => settle(t, key, fence, dead ? t.dead : t.pending, { next_attempt_at: nextAttemptAt, last_error: error }, now);

/** Gives a claim back unstarted: due at once, its attempt not counted. */
export const release = (t: WorkTable, key: readonly unknown[], fence: number, now: number) =>
  settle(t, key, fence, t.pending, { [t.attempts]: { sql: `${t.attempts} - 1` } }, now);
