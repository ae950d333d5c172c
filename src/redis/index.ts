import { RedisStore, type RedisStoreOptions } from './store.js';

export { type RedisClientLike, RedisStore, type RedisStoreOptions } from './store.js';

/**
 * `oncely/redis`: the record store on Redis. Needs the `ioredis` package when given a URL; a
 * connected ioredis or node-redis client you pass in is used as is and never closed by the store.
 * @example
 * import { redisStore } from 'oncely/redis';
 * const store = redisStore({ url: 'redis://127.0.0.1:6379', prefix: 'billing:' });
 */
export function redisStore(options: RedisStoreOptions): RedisStore {
  return new RedisStore(options);
}
