/** Statements on one connection, inside or outside a transaction. Placeholders are `?` on both dialects. */
export interface Sql {
  readonly dialect: 'sqlite' | 'postgres';
  /** Rows of a query. */
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
