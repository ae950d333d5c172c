/**
 * The few better-sqlite3 members oncely uses, declared rather than imported so a caller's own
 * Database can be passed as `tx` or `database`.
 */

/** An open better-sqlite3 Database. */
export interface SqliteDatabase {
  prepare(sql: string): SqliteStatement;
  exec(sql: string): unknown;
  pragma(source: string, options?: { simple?: boolean }): unknown;
  close(): unknown;
  readonly inTransaction: boolean;
}

/** A prepared statement. */
export interface SqliteStatement {
  run(...params: unknown[]): { changes: number };
  get(...params: unknown[]): unknown;
  all(...params: unknown[]): unknown[];
}
