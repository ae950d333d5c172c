import { afterAll } from 'vitest';
import { redisStore } from '../src/redis/index.js';
import { describeConformance } from './conformance.js';
import { connectRedis, dropPrefix, freshPrefix, REDIS_URL } from './support/redis.js';

const prefix = freshPrefix();
const client = await connectRedis();

afterAll(async () => {
  await dropPrefix(client, prefix);
  await client.close();
});

describeConformance('redis (url)', () => redisStore({ url: REDIS_URL, prefix: `${prefix}url:` }));
describeConformance('redis (client)', () => redisStore({ client, prefix: `${prefix}client:` }));
