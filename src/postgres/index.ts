/**
 * oncely on PostgreSQL: `postgresStore({ connectionString })` or `postgresStore({ pool })`.
 * Needs the optional `pg` package when given a connection string.
 * @example
 * import { postgresStore } from 'oncely/postgres'
 * const store = postgresStore({ connectionString: process.env.DATABASE_URL!, schema: 'oncely' })
 */
export type { PgPool, PgPoolClient, PgQueryable, PgResult } from './driver.js';
export {
  type PostgresLayout,
  type PostgresStore,
  type PostgresStoreOptions,
  postgresStore,
} from './store.js';
