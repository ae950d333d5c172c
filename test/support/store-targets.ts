import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { dropDatabase, freshDatabase, MYSQL_URL } from './mysql.js';
import { dropSchema, freshSchema, POSTGRES_URL } from './postgres.js';
import { connectRedis, dropPrefix, freshPrefix, REDIS_URL } from './redis.js';
import { type StoreName, selectStores } from './store-filter.js';
import type { StoreSpec } from './stores.js';

/** One store of a file's matrix: the same spec for this process and its children, and the cleanup of what it made. */
export interface StoreTarget {
  name: StoreName;
  title: string;
  spec: () => StoreSpec;
  cleanup: () => Promise<void>;
}

const TITLES: Record<'sqlite' | 'postgres' | 'redis' | 'mysql', string> = {
  sqlite: 'SQLite',
  postgres: 'PostgreSQL',
  redis: 'Redis',
  mysql: 'MySQL',
};

/**
 * A fresh SQLite file, PostgreSQL schema, Redis prefix or MySQL database for each of `names`, as
 * ONCELY_STORES selects them; `tag` names the SQLite file's folder.
 */
export function storeTargets(names: readonly (keyof typeof TITLES)[], tag: string): StoreTarget[] {
  const make = (name: keyof typeof TITLES): Omit<StoreTarget, 'name' | 'title'> => {
    switch (name) {
      case 'sqlite': {
        const dir = mkdtempSync(join(tmpdir(), `oncely-${tag}-`));
        return { spec: () => ({ kind: 'sqlite', path: join(dir, 'records.db') }), cleanup: async () => {} };
      }
      case 'postgres': {
        const schema = freshSchema();
        return {
          spec: () => ({ kind: 'postgres', connectionString: POSTGRES_URL, schema }),
          cleanup: () => dropSchema(schema),
        };
      }
      case 'redis': {
        const prefix = freshPrefix();
        return {
          spec: () => ({ kind: 'redis', url: REDIS_URL, prefix }),
          cleanup: async () => {
            const client = await connectRedis();
            await dropPrefix(client, prefix);
            await client.quit();
          },
        };
      }
      case 'mysql': {
        // The store creates its database when missing.
        const database = freshDatabase();
        return {
          spec: () => ({ kind: 'mysql', uri: MYSQL_URL, database }),
          cleanup: () => dropDatabase(database),
        };
      }
    }
  };
  return selectStores(names.map((name) => ({ name, title: TITLES[name] }))).map((store) => ({
    ...store,
    ...make(store.name as keyof typeof TITLES),
  }));
}
