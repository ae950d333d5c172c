/**
 * The few pg members oncely uses, declared rather than imported so `pg` stays an optional peer
 * dependency and a caller's own pool or client fits. A pg Pool and a pg PoolClient satisfy them.
 */

/** What a statement returns; pg's QueryResult fits. */
export interface PgResult {
  rows: unknown[];
  rowCount?: number | null;
}

/** Runs statements: a pg Pool, or a pg Client on which the caller ran BEGIN. */
export interface PgQueryable {
  query(text: string, values?: unknown[]): Promise<PgResult>;
}

/** A connection checked out of a pool. */
export interface PgPoolClient extends PgQueryable {
  release(error?: Error | boolean): void;
  /** A pg client is an EventEmitter: 'error' when its backend dies. */
  on?(event: 'error', listener: (error: Error) => void): unknown;
  off?(event: 'error', listener: (error: Error) => void): unknown;
}

/** The few pool methods the record store uses; a pg Pool fits. */
export interface PgPool extends PgQueryable {
  connect(): Promise<PgPoolClient>;
  end(): Promise<void>;
}

/**
 * A pg Pool as the `Db` seam drives it: a checkout by callback too (its listener must be attached
 * before the pool hands the client over, see db/postgres.ts), and the pool's own 'error' events.
 */
export interface PgDriverPool extends PgPool {
  connect(): Promise<PgPoolClient>;
  connect(callback: (error: Error | undefined, client: PgPoolClient | undefined) => void): void;
  on(event: 'error', listener: (error: Error) => void): unknown;
}
