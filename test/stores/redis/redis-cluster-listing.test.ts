import { afterAll } from 'vitest';
import { redisStore } from '../../../src/redis/index.js';
import { freshPrefix } from '../../support/redis.js';
import { startCluster } from '../../support/redis-cluster.js';
import { describeListing } from '../listing.js';

const cluster = await startCluster();

afterAll(() => cluster.stop());

describeListing('redis cluster', () => redisStore({ cluster: cluster.nodes, prefix: freshPrefix() }));
