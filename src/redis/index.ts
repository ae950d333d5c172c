import { RedisStore, type RedisStoreOptions } from './store.js';

export { type RedisClientLike, type RedisClusterNode, RedisStore, type RedisStoreOptions } from './store.js';

/**
 * `oncely/redis`: the record store on Redis or Redis Cluster. Needs the `ioredis` package when
 * given a URL or a cluster's nodes; a connected ioredis (Redis or Cluster) or node-redis client
 * you pass in is used as is and never closed by the store.
 * @example
 * import { redisStore } from 'oncely/redis';
 * const store = redisStore({ url: 'redis://127.0.0.1:6379', prefix: 'billing:' });
 * const clustered = redisStore({ cluster: [{ host: '10.0.0.1', port: 6379 }], replicas: 1 });
 */
export function redisStore(options: RedisStoreOptions): RedisStore {
  return new RedisStore(options);
}
