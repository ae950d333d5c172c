import { randomUUID } from 'node:crypto';
import { Cluster } from 'ioredis';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { recordRef, type StoredRecord } from '../../../src/core/record.js';
import { SHARDS, shardOf } from '../../../src/redis/cluster.js';
import { redisStore } from '../../../src/redis/index.js';
import { LIST_TIME_BUDGET_MS } from '../../../src/redis/listing.js';
import { freshPrefix, seedOtherKeys } from '../../support/redis.js';
import { startCluster } from '../../support/redis-cluster.js';
import { describeCrowdedListing } from '../crowded-listing.js';
import { describeListing } from '../listing.js';

// Redis's default node timeout, not the 1 s the failover tests use: a wave of SCAN listing runs
// holds a master for up to 5 s on a loaded 2-core machine (5 or 6 shards' runs of up to 100,000
// keys each), and with 1 s its replica took over in the middle of listings, whose cursors then
// went on in another process's hash table: records listed twice, others skipped.
const cluster = await startCluster({ nodeTimeoutMs: 15_000 });
const client = new Cluster(cluster.nodes, { lazyConnect: true });
await client.connect();
// A cluster shared with another application: 200,000 keys of its own, their hash tags spread over
// every master (seedOtherKeys: 16 tags; 100,000 on one master here), so a node's SCAN visits
// more of them than one listing run may (SCAN_BUDGET).
const other = await seedOtherKeys(
  (args) => client.call(args[0] as string, args.slice(1)),
  `other-app:${randomUUID().slice(0, 8)}:`,
  200_000,
);

/** The cluster's current epoch, as the node that knows the highest: every failover raises it. */
async function epoch(): Promise<number> {
  const infos = await Promise.all(cluster.nodes.map(({ port }) => cluster.cli(port, 'CLUSTER', 'INFO')));
  return Math.max(...infos.map((info) => Number(/cluster_current_epoch:(\d+)/.exec(info)?.[1])));
}
const started = await epoch();

// A listing across a failover goes on on another node's table (see README, Redis Cluster): not what
// these tests measure, so a failover is its own failure, named, rather than a puzzle in their counts.
afterEach(async () => {
  expect(await epoch(), 'no master failed over during the test').toBe(started);
});

afterAll(async () => {
  await other.drop();
  await client.quit();
  await cluster.stop();
});

describeListing('redis cluster', () => redisStore({ cluster: cluster.nodes, prefix: freshPrefix() }), {
  fullPages: true,
});
describeCrowdedListing('Redis Cluster', () => redisStore({ cluster: cluster.nodes, prefix: freshPrefix() }));

describe('Redis Cluster listing, pages cut inside shards', () => {
  it('review3.9: Redis Cluster listing among other keys: full pages, each record once, none missed', async () => {
    const store = redisStore({ client, prefix: freshPrefix() });
    const now = Date.now();
    // 1,000 records of one tenant over all 16 shards, 40 of another: pages of 33 and 7 end inside a shard.
    const ids = [
      ...Array.from({ length: 1_000 }, (_, i) => ({ tenant: 'spread', action: 'charge', key: `k-${i}` })),
      ...Array.from({ length: 40 }, (_, i) => ({ tenant: 'few', action: 'charge', key: `k-${i}` })),
    ];
    expect(new Set(ids.map((id) => shardOf(id))).size).toBe(SHARDS);
    await Promise.all(ids.map((id) => store.insertOrGet(record(id, now))));
    for (const [query, expected] of [
      [{ tenant: 'spread', limit: 33 }, 1_000],
      [{ tenant: 'few', limit: 7 }, 40],
      [{ limit: 250 }, 1_040],
      [{ state: 'unknown' as const, tenant: 'few', limit: 3 }, 40],
    ] as const) {
      const refs: string[] = [];
      const sizes: number[] = [];
      const slowest = { ms: 0 };
      let cursor: string | undefined;
      for (let n = 0; ; n++) {
        if (n > 1_000) throw new Error(`listing ${JSON.stringify(query)} did not end`);
        const started = Date.now();
        const page = await store.list(cursor === undefined ? query : { ...query, cursor });
        slowest.ms = Math.max(slowest.ms, Date.now() - started);
        sizes.push(page.records.length);
        refs.push(...page.records.map(recordRef));
        if (page.cursor === null) break;
        // Full pages are the proof that each sparse page finished within list's 5 s budget.
        expect(page.records.length, `${JSON.stringify(query)} page ${n + 1}: sizes ${sizes}`).toBe(query.limit);
        cursor = page.cursor;
      }
      const want = ids.filter((id) => !('tenant' in query) || id.tenant === query.tenant).map(recordRef);
      expect(want.length).toBe(expected);
      expect(refs.length, `${JSON.stringify(query)}: ${refs.length - new Set(refs).size} listed twice`).toBe(
        new Set(refs).size,
      );
      expect(new Set(refs), JSON.stringify(query)).toEqual(new Set(want));
      expect(slowest.ms, `${JSON.stringify(query)}: slowest page`).toBeLessThan(LIST_TIME_BUDGET_MS + 2_000);
    }
    await store.close();
  }, 240_000);
});

/** An unknown record of `id` (unknown: indexed, and never expiring), as the listing queries above want. */
function record(id: { tenant: string; action: string; key: string }, now: number): StoredRecord {
  return {
    ...id,
    state: 'unknown',
    fingerprint: 'fp',
    fence: 1,
    attempts: 1,
    leaseUntil: null,
    result: null,
    traceId: `t-${id.key}`,
    createdAt: now,
    updatedAt: now,
    completedAt: null,
    expiresAt: null,
  };
}
