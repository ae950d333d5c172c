import { PostgresStore, type PostgresStoreOptions } from './store.js';

export type { PgPool, PgPoolClient, PgQueryable, PgResult } from './driver.js';
export { type PostgresLayout, PostgresStore, type PostgresStoreOptions } from './store.js';

/**
 * oncely on PostgreSQL: a record store on your pool or on one it opens from a connection string
 * (needs the optional `pg` package then). See PostgresStore.
 * @example
 * import { postgresStore } from 'oncely/postgres'
 * const store = postgresStore({ connectionString: process.env.DATABASE_URL!, schema: 'oncely' })
 * const once = await createOncely({ store })
 */
export function postgresStore(options: PostgresStoreOptions): PostgresStore {
  return new PostgresStore(options);
}
