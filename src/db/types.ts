/** Statements on one connection, inside or outside a transaction. Placeholders are `?` on both dialects. */
export interface Sql {
  readonly dialect: 'sqlite' | 'postgres';
  /**
   * Rows of a query. Integers past ±2^53 come back exact, never rounded: a bigint on SQLite, text
   * on PostgreSQL (pg's int8); smaller ones are numbers on both.
   */
  all<R = Record<string, unknown>>(sql: string, params?: readonly unknown[]): Promise<R[]>;
  /** Runs a statement; returns the number of rows it changed. */
  run(sql: string, params?: readonly unknown[]): Promise<number>;
  /** The driver object to pass to the engine as `tx` (a better-sqlite3 Database or a pg client). */
  readonly handle: unknown;
}

/** A database: the SQL seam every host part uses, so one codebase runs on SQLite and PostgreSQL. */
export interface Db extends Sql {
  /** Runs `fn` in one transaction: committed if it resolves, rolled back if it throws. */
  transaction<T>(fn: (tx: Sql) => Promise<T>): Promise<T>;
  /** Runs a script of several statements (schema files). */
  exec(script: string): Promise<void>;
  /** Where the engine's records live: same database, so they commit with the business writes. */
  readonly target: string;
  /** PostgreSQL: the schema holding the app's and oncely's tables. */
  readonly schema?: string;
  close(): Promise<void>;
}

/** The most statement texts a database keeps prepared; the least recently used go first. */
export const STATEMENT_CACHE_MAX = 500;

/** A database that keeps statements prepared by text; its size is bounded by STATEMENT_CACHE_MAX. */
export interface StatementCache {
  /** How many statement texts it holds now (for tests and metrics). */
  cachedStatements(): number;
}
