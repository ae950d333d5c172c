import { describeClockSkew, describeProcesses } from './processes.js';
import { connectRedis, dropPrefix, freshPrefix, REDIS_URL } from './support/redis.js';

const prefix = freshPrefix();
describeProcesses(
  'redis',
  () => ({ kind: 'redis', url: REDIS_URL, prefix }),
  async () => {
    const client = await connectRedis();
    await dropPrefix(client, prefix);
    await client.close();
  },
);

const skewPrefix = freshPrefix();
describeClockSkew(
  'redis',
  () => ({ kind: 'redis', url: REDIS_URL, prefix: skewPrefix }),
  async () => {
    const client = await connectRedis();
    await dropPrefix(client, skewPrefix);
    await client.close();
  },
);
