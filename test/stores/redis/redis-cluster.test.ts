import { Cluster } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { createOncely } from '../../../src/index.js';
import { SHARD_TAGS, SHARDS, shardOf, slotOf } from '../../../src/redis/cluster.js';
import { redisStore } from '../../../src/redis/index.js';
import { memberOf } from '../../../src/redis/listing.js';
import { freshPrefix } from '../../support/redis.js';
import { startCluster } from '../../support/redis-cluster.js';
import { describeConformance } from '../conformance.js';

// One cluster for the file: 3 masters, 3 replicas, on loopback ports of a temporary folder.
const cluster = await startCluster();
const client = new Cluster(cluster.nodes, { lazyConnect: true });
await client.connect();
const prefix = freshPrefix();

afterAll(async () => {
  await client.quit();
  await cluster.stop();
});

describeConformance('redis cluster (nodes)', () => redisStore({ cluster: cluster.nodes, prefix: `${prefix}nodes:` }));
describeConformance('redis cluster (ioredis Cluster client)', () => redisStore({ client, prefix: `${prefix}client:` }));
describeConformance('redis cluster (replicas: 1)', () =>
  redisStore({ cluster: cluster.nodes, prefix: `${prefix}wait:`, replicas: 1 }),
);

/** The master serving `slot`, by CLUSTER SLOTS. */
async function masterOf(slot: number): Promise<number> {
  const ranges = (await client.cluster('SLOTS')) as unknown as [number, number, [string, number]][];
  const range = ranges.find(([low, high]) => slot >= low && slot <= high);
  if (!range) throw new Error(`no master serves slot ${slot}`);
  return range[2][1];
}

describe('redis cluster specifics', () => {
  it("keeps a record and its shard's index sets in one slot, and spreads the shards over every master", async () => {
    const p = `${prefix}layout:`;
    const store = redisStore({ client, prefix: p });
    const once = await createOncely({ store, tenant: 'acme' });
    // A claim held open: its record sits in the in_progress index of its shard.
    let release = () => {};
    let running = () => {};
    const started = new Promise<void>((r) => (running = r));
    // The function starts once its claim is stored: waited for, not polled against a deadline.
    const held = once.run({ action: 'layout', key: 'k-1' }, () => {
      running();
      return new Promise<void>((r) => (release = r));
    });
    const id = { tenant: 'acme', action: 'layout', key: 'k-1' };
    const tag = SHARD_TAGS[shardOf(id)] as string;
    await started;
    expect(await client.exists(`${p}{${tag}}r:${memberOf(id)}`)).toBe(1);
    expect(await client.sismember(`${p}{${tag}}i:in_progress`, `${p}{${tag}}r:${memberOf(id)}`)).toBe(1);
    expect(await client.cluster('KEYSLOT', `${p}{${tag}}r:${memberOf(id)}`)).toBe(slotOf(tag));
    expect(await client.cluster('KEYSLOT', `${p}{${tag}}i:unknown`)).toBe(slotOf(tag));
    release();
    await held;
    expect(await client.scard(`${p}{${tag}}i:in_progress`)).toBe(0);
    // Sixteen shards in distinct slots, over all three masters; ids of many keys land in every shard.
    const masters = await Promise.all(SHARD_TAGS.map((t) => masterOf(slotOf(t))));
    expect(new Set(SHARD_TAGS.map(slotOf)).size).toBe(SHARDS);
    expect(new Set(masters).size).toBe(3);
    const used = new Set(Array.from({ length: 400 }, (_, i) => shardOf({ ...id, key: `k-${i}` })));
    expect(used.size).toBe(SHARDS);
    await once.close();
  });

  it('refuses a prefix with a brace (it would be the hash tag of every key) and replicas on node-redis', () => {
    expect(() => redisStore({ cluster: cluster.nodes, prefix: 'a{b}:' })).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    );
    expect(() => redisStore({ client, prefix: '{x}' })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    expect(() => redisStore({ cluster: [], prefix })).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    expect(() => redisStore({ client: { sendCommand: async () => 'OK' }, replicas: 1 })).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    );
    expect(() => redisStore({ cluster: cluster.nodes, replicas: -1 })).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    );
  });

  it('reports a cluster it cannot reach as STORE_UNAVAILABLE and never runs the function', async () => {
    const once = await createOncely({ store: redisStore({ cluster: [{ host: '127.0.0.1', port: 1 }], prefix }) });
    let runs = 0;
    await expect(once.run({ action: 'a', key: 'k' }, async () => runs++)).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
    });
    expect(runs).toBe(0);
    await once.close();
  });

  it('fails a write no replica acknowledged with STORE_UNAVAILABLE, and never runs the function', async () => {
    // Each master has one replica: two can never acknowledge. Both ways of giving the cluster.
    for (const store of [
      redisStore({ cluster: cluster.nodes, prefix: `${prefix}two:`, replicas: 2, timeout: 400 }),
      redisStore({ client, prefix: `${prefix}two-client:`, replicas: 2, timeout: 400 }),
    ]) {
      const once = await createOncely({ store });
      let runs = 0;
      await expect(once.run({ action: 'a', key: 'k' }, async () => runs++)).rejects.toMatchObject({
        code: 'STORE_UNAVAILABLE',
      });
      expect(runs).toBe(0);
      await once.close();
    }
  });

  it('reindexes every shard', async () => {
    const p = `${prefix}reindex:`;
    const store = redisStore({ cluster: cluster.nodes, prefix: p });
    const now = Date.now();
    const base = { tenant: 'acme', action: 'reindex', fingerprint: 'f', traceId: 't', result: null };
    const times = { createdAt: now, updatedAt: now, completedAt: null, expiresAt: null, attempts: 1 };
    for (let i = 0; i < 40; i++)
      await store.insertOrGet({ ...base, ...times, key: `u-${i}`, state: 'unknown', fence: 1, leaseUntil: null });
    // Drop every shard's index, as records written before the indexes existed would have none.
    for (const tag of SHARD_TAGS) await client.del(`${p}{${tag}}i:unknown`);
    expect((await store.list({ state: 'unknown', limit: 100 })).records).toHaveLength(0);
    expect(await store.reindex()).toBe(40);
    expect((await store.list({ state: 'unknown', limit: 100 })).records).toHaveLength(40);
    await store.close();
  });
});
