import { randomUUID } from 'node:crypto';
import { afterAll } from 'vitest';
import { redisStore } from '../../../src/redis/index.js';
import { connectRedis, dropPrefix, freshPrefix, seedOtherKeys } from '../../support/redis.js';
import { describeCrowdedListing } from '../crowded-listing.js';
import { describeListing } from '../listing.js';

const prefix = freshPrefix();
const client = await connectRedis();
// A Redis shared with another application, as in production and CI: 200,000 keys of its own.
const other = await seedOtherKeys(client, `other-app:${randomUUID().slice(0, 8)}:`, 200_000);

afterAll(async () => {
  await other.drop();
  await dropPrefix(client, prefix);
  await client.close();
});

describeListing('redis', () => redisStore({ client, prefix }), { fullPages: true });
describeCrowdedListing('redis', () => redisStore({ client, prefix: `${prefix}crowded:` }));
