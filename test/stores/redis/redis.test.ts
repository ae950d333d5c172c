import { afterAll, describe, expect, it } from 'vitest';
import { createOncely } from '../../../src/index.js';
import { redisStore } from '../../../src/redis/index.js';
import { connectRedis, dropPrefix, freshPrefix, REDIS_URL } from '../../support/redis.js';
import { describeConformance } from '../conformance.js';

const prefix = freshPrefix();
const client = await connectRedis();

afterAll(async () => {
  await dropPrefix(client, prefix);
  await client.close();
});

describeConformance('redis (url)', () => redisStore({ url: REDIS_URL, prefix: `${prefix}url:` }));
describeConformance('redis (client)', () => redisStore({ client, prefix: `${prefix}client:` }));

describe('redis specifics', () => {
  it('reports a Redis it cannot reach as STORE_UNAVAILABLE and never runs the function', async () => {
    const once = await createOncely({ store: redisStore({ url: 'redis://127.0.0.1:1', prefix }) });
    let runs = 0;
    await expect(once.run({ action: 'a', key: 'k' }, async () => runs++)).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
    });
    expect(runs).toBe(0);
    await once.close();
  });

  it('refuses to join a transaction it cannot be part of', async () => {
    const once = await createOncely({ store: redisStore({ client, prefix }) });
    await expect(once.run({ action: 'a', key: 'k', tx: {} }, async () => 1)).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
    });
  });
});
