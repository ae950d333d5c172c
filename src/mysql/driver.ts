/**
 * The few mysql2 members oncely uses, declared rather than imported so `mysql2` stays an optional
 * peer dependency and a caller's own pool or connection fits. A `mysql2/promise` Pool and
 * PoolConnection satisfy them.
 */

/** What a statement answers: `[rows, fields]` for a SELECT, `[{ affectedRows }, ...]` for a write. */
export type MysqlAnswer = [unknown, unknown];

/** Runs statements: a mysql2/promise Pool, or a connection on which the caller began a transaction. */
export interface MysqlQueryable {
  // biome-ignore lint/suspicious/noExplicitAny: mysql2 types its values as any; a narrower type would not accept its pools.
  query(sql: string, values?: any): Promise<MysqlAnswer>;
}

/** A connection checked out of a pool: the caller's `tx`, or the store's own for a transaction of its writes. */
export interface MysqlConnection extends MysqlQueryable {
  release(): void;
  /** Closes the connection and drops it from its pool (for one that failed mid-transaction). */
  destroy?(): void;
  /** A mysql2 connection is an EventEmitter: 'error' when its server connection dies while idle. */
  on?(event: 'error', listener: (error: Error) => void): unknown;
}

/** The few pool methods the record store uses; a mysql2/promise Pool fits. */
export interface MysqlPool extends MysqlQueryable {
  getConnection(): Promise<MysqlConnection>;
  end(): Promise<void>;
}
