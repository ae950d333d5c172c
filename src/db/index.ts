import { openPostgres } from './postgres.js';
import { openSqlite } from './sqlite.js';
import type { Db } from './types.js';

export type { Db, Sql } from './types.js';

/** Opens a database from `--db`: a postgres:// URL, or a SQLite file path (default ./.oncely/app.db). */
export function openDb(target = './.oncely/app.db'): Promise<Db> {
  return /^postgres(ql)?:\/\//.test(target) ? openPostgres(target) : Promise.resolve(openSqlite(target));
}
