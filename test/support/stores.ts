import type { RecordStore } from '../../src/index.js';
import { mysqlStore } from '../../src/mysql/index.js';
import { postgresStore } from '../../src/postgres/index.js';
import { redisStore } from '../../src/redis/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';

/** How a child process finds the store its parent uses: serialisable, passed on the command line. */
export type StoreSpec =
  | { kind: 'sqlite'; path: string }
  | { kind: 'postgres'; connectionString: string; schema: string }
  | { kind: 'redis'; url: string; prefix: string }
  | { kind: 'redis-cluster'; nodes: { host: string; port: number }[]; prefix: string; replicas?: number }
  | { kind: 'mysql'; uri: string; database: string };

/** Opens the store a spec names. */
export function openStore(spec: StoreSpec): RecordStore {
  switch (spec.kind) {
    case 'sqlite':
      return sqliteStore({ path: spec.path });
    case 'postgres':
      return postgresStore({ connectionString: spec.connectionString, schema: spec.schema });
    case 'redis':
      return redisStore({ url: spec.url, prefix: spec.prefix });
    case 'redis-cluster':
      return redisStore({ cluster: spec.nodes, prefix: spec.prefix, replicas: spec.replicas ?? 0 });
    case 'mysql':
      return mysqlStore({ uri: spec.uri, database: spec.database });
  }
}
