import { afterAll } from 'vitest';
import { redisStore } from '../../../src/redis/index.js';
import { freshPrefix } from '../../support/redis.js';
import { startCluster } from '../../support/redis-cluster.js';
import { describeListing } from '../listing.js';

const cluster = await startCluster();

afterAll(() => cluster.stop());

// Full pages, as on a single Redis. Not yet among another application's 200,000 keys: a sparse
// SCAN listing reads every node once per shard on it (16 shards over 3 masters), and on a loaded
// machine that runs past list's time budget (README, Redis Cluster).
describeListing('redis cluster', () => redisStore({ cluster: cluster.nodes, prefix: freshPrefix() }), {
  fullPages: true,
});
