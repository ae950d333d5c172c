import { MysqlStore, type MysqlStoreOptions } from './store.js';

export type { MysqlAnswer, MysqlConnection, MysqlPool, MysqlQueryable } from './driver.js';
export { type MysqlLayout, MysqlStore, type MysqlStoreOptions } from './store.js';

/**
 * oncely on MySQL or MariaDB: a record store on your mysql2/promise pool or on one it opens from a
 * URI (needs the optional `mysql2` package then). See MysqlStore.
 * @example
 * import { mysqlStore } from 'oncely/mysql'
 * const store = mysqlStore({ uri: process.env.MYSQL_URL! })
 * const once = await createOncely({ store })
 */
export function mysqlStore(options: MysqlStoreOptions): MysqlStore {
  return new MysqlStore(options);
}
