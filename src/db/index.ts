import { OncelyError } from '../core/errors.js';
import { redactUrl } from '../core/url.js';
import { openPostgres, type PostgresOptions } from './postgres.js';
import { openSqlite } from './sqlite.js';
import type { Db } from './types.js';

export type { PostgresOptions } from './postgres.js';
export type { Db, Sql } from './types.js';

const POSTGRES = /^postgres(ql)?:\/\//;
// Any other `scheme://` would otherwise become a SQLite file in a folder named after the scheme.
const OTHER_URL = /^([a-z][a-z0-9+.-]*):\/\//i;

/**
 * Opens a database from `--db`: a postgres:// URL, or a SQLite file path (default ./.oncely/app.db).
 * `options` apply to PostgreSQL (`poolSize`); SQLite has one connection. Another URL (mysql://,
 * redis://) is DB_UNSUPPORTED and a postgres:// URL that does not parse is URL_INVALID, both
 * before anything is opened.
 */
export async function openDb(target = './.oncely/app.db', options: PostgresOptions = {}): Promise<Db> {
  if (POSTGRES.test(target)) return openPostgres(target, options);
  const scheme = OTHER_URL.exec(target)?.[1];
  if (scheme !== undefined)
    throw new OncelyError(
      'DB_UNSUPPORTED',
      `the database ${redactUrl(target)} is a ${scheme}:// URL; the host runs on a SQLite file path or a postgres:// URL (MySQL and Redis hold the engine's records only: mysqlStore, redisStore)`,
    );
  return openSqlite(target);
}
