/**
 * Whether a database refused a statement for what it holds rather than for its own state: the one
 * reading of driver errors that the record stores (a batch item's own error), the data store (a
 * typed refusal) and the broker inbox (a message to isolate) share.
 */

/** What a statement was refused for: a constraint (unique, foreign key, not null, check) or a value (type, size, a NUL in text). */
export type DataRefusal = 'constraint' | 'value';

/**
 * PostgreSQL's and MySQL's SQLSTATE classes 23 (integrity constraint) and 22 (data exception), and
 * SQLite's constraint, type and size codes; undefined for anything else (a lost connection, a lock, a bug).
 */
export function dataRefusal(error: unknown): DataRefusal | undefined {
  const e = error as { code?: unknown; sqlState?: unknown } | null;
  // mysql2 puts the SQLSTATE in sqlState (code is its ER_ name); pg and better-sqlite3 in code.
  const state = typeof e?.sqlState === 'string' ? e.sqlState : typeof e?.code === 'string' ? e.code : undefined;
  if (state === undefined) return undefined;
  if (state.startsWith('SQLITE_CONSTRAINT')) return 'constraint';
  if (state === 'SQLITE_MISMATCH' || state === 'SQLITE_TOOBIG') return 'value';
  if (state.length !== 5) return undefined;
  if (state.startsWith('23')) return 'constraint';
  if (state.startsWith('22')) return 'value';
  return undefined;
}
