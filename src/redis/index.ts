/**
 * `oncely/redis`: the record store on Redis. Needs the `ioredis` package when given a URL; a
 * connected ioredis or node-redis client you pass in is used as is and never closed by the store.
 * @example
 * import { redisStore } from 'oncely/redis';
 * const store = redisStore({ url: 'redis://127.0.0.1:6379' });
 */
export { type RedisClientLike, type RedisStoreOptions, redisStore } from './store.js';
