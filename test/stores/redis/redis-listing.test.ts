import { afterAll } from 'vitest';
import { redisStore } from '../../../src/redis/index.js';
import { connectRedis, dropPrefix, freshPrefix } from '../../support/redis.js';
import { describeListing } from '../listing.js';

const prefix = freshPrefix();
const client = await connectRedis();

afterAll(async () => {
  await dropPrefix(client, prefix);
  await client.close();
});

describeListing('redis', () => redisStore({ client, prefix }));
