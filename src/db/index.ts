import { openPostgres, type PostgresOptions } from './postgres.js';
import { openSqlite } from './sqlite.js';
import type { Db } from './types.js';

export type { PostgresOptions } from './postgres.js';
export type { Db, Sql } from './types.js';

/**
 * Opens a database from `--db`: a postgres:// URL, or a SQLite file path (default ./.oncely/app.db).
 * `options` apply to PostgreSQL (`poolSize`); SQLite has one connection.
 */
export function openDb(target = './.oncely/app.db', options: PostgresOptions = {}): Promise<Db> {
  return /^postgres(ql)?:\/\//.test(target) ? openPostgres(target, options) : Promise.resolve(openSqlite(target));
}
