import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { SHARD_TAGS, slotOf } from '../../../src/redis/cluster.js';
import { redisStore } from '../../../src/redis/index.js';
import { burstOneKey } from '../../engine/support/processes.js';
import { freshPrefix } from '../../support/redis.js';
import { startCluster } from '../../support/redis-cluster.js';
import { startWorker } from '../../support/spawn.js';
import type { StoreSpec } from '../../support/stores.js';
import { until } from '../../support/wait.js';

const cluster = await startCluster();

afterAll(() => cluster.stop());

/** Every line of the sink file, counted by key: how often each key's effect ran. */
function effects(sink: string): Map<string, number> {
  const counts = new Map<string, number>();
  for (const key of readFileSync(sink, 'utf8').split('\n').filter(Boolean)) counts.set(key, (counts.get(key) ?? 0) + 1);
  return counts;
}

describe('redis cluster across processes', () => {
  it('4 processes x 50 concurrent calls of one key: one execution, waiters get the value', async () => {
    const spec: StoreSpec = { kind: 'redis-cluster', nodes: cluster.nodes, prefix: freshPrefix() };
    await burstOneKey(spec, `burst-${randomUUID().slice(0, 8)}`);
  }, 30_000);

  it('a master killed (SIGKILL) in a burst, its replica promoted: no key twice, every caller answered, nothing acknowledged lost', async () => {
    const spec: StoreSpec = { kind: 'redis-cluster', nodes: cluster.nodes, prefix: freshPrefix(), replicas: 1 };
    const sink = join(mkdtempSync(join(tmpdir(), 'oncely-sink-')), 'effects.log');
    writeFileSync(sink, '');
    const action = `failover-${randomUUID().slice(0, 8)}`;
    const keys = 2_000;
    const script = fileURLToPath(new URL('./cluster-failover-worker.ts', import.meta.url));
    // Four processes over the same keys from four starting points: every key is contended.
    const workers = Array.from({ length: 4 }, (_, i) =>
      startWorker({ store: spec, action, keys, offset: i * (keys / 4), concurrency: 16, sink }, script),
    );
    await Promise.all(workers.map((w) => w.waitFor('ready')));
    // The master serving shard 0's slot dies while the burst runs.
    const victim = await masterOf(slotOf(SHARD_TAGS[0] as string));
    const started = Date.now();
    for (const w of workers) w.child.stdin.write('go\n');
    // Killed once every process has had a value, so the burst runs on both sides of the kill.
    await Promise.all(workers.map((w) => w.waitFor('answered')));
    cluster.kill(victim);
    const killedAt = Date.now();
    // Once its replica took over, the dead node comes back empty and rejoins as the new master's
    // replica, as an operator would restart it: until then the promoted master has no replica, and
    // with replicas: 1 its writes are refused (STORE_UNAVAILABLE) rather than answered unreplicated.
    let promotedAt = 0;
    const rejoined = (async () => {
      // Promoted: three masters again, the victim not among them (marked failed, it is left out of
      // masters() at once, before its replica is elected).
      await until(
        'three masters again, the victim not among them',
        () => cluster.masters(),
        (m) => m.length === 3 && !m.includes(victim),
        { timeoutMs: 60_000, intervalMs: 50 },
      );
      promotedAt = Date.now();
      cluster.restart(victim);
    })();
    const outcomes = (
      await Promise.all(
        workers.map(
          async (w) => JSON.parse(await w.waitFor('[')) as { key: string; kind: string; at: number; by?: number }[],
        ),
      )
    ).flat();
    await rejoined;
    await cluster.waitHealthy();
    expect(await cluster.masters()).not.toContain(victim);

    // The burst straddled the failover: calls answered before the kill and after the promotion.
    expect(outcomes.some((o) => o.at < killedAt)).toBe(true);
    expect(outcomes.some((o) => o.at > promotedAt)).toBe(true);
    expect(outcomes).toHaveLength(4 * keys);
    // Every caller answered: a value (its own execution or a replay), IN_PROGRESS (another holds the
    // key), STORE_UNAVAILABLE (nothing ran for it), or LEASE_LOST: its function ran, and its
    // completion's answer was lost in the failover, so the engine's retry of that completion found
    // the record already completed (by that first try: the value is stored and replays, checked below);
    // or OUTCOME_NOT_STORED: its function ran, and its completion was refused until `completionRetry`
    // ran out (a promoted master has no replica for `replicas: 1` until the dead node rejoins).
    const kinds = new Map<string, number>();
    for (const o of outcomes) kinds.set(o.kind, (kinds.get(o.kind) ?? 0) + 1);
    for (const kind of kinds.keys())
      expect([
        'executed',
        'replayed',
        'IN_PROGRESS',
        'STORE_UNAVAILABLE',
        'LEASE_LOST',
        'OUTCOME_NOT_STORED',
      ]).toContain(kind);
    // No key executed twice: one effect at most per key, and one execution answered at most.
    const ran = effects(sink);
    for (const [key, n] of ran) expect(n, key).toBe(1);
    for (const o of outcomes.filter((o) => o.kind === 'LEASE_LOST' || o.kind === 'OUTCOME_NOT_STORED'))
      expect(ran.get(o.key), o.key).toBe(1);
    const executions = outcomes.filter((o) => o.kind === 'executed');
    expect(new Set(executions.map((o) => o.key)).size).toBe(executions.length);
    // Nothing acknowledged lost: every key a caller got a value for is stored, with that value.
    const store = redisStore({ cluster: cluster.nodes, prefix: spec.prefix });
    const acknowledged = outcomes.filter((o) => o.kind === 'executed' || o.kind === 'replayed');
    for (const o of acknowledged) {
      const record = await store.get({ tenant: 'acme', action, key: o.key });
      expect(record?.state, o.key).toBe('succeeded');
      expect(JSON.parse(record?.result as string)).toEqual({ v: { by: o.by } });
    }
    await store.close();
    console.log(
      `failover burst: ${outcomes.length} calls in ${Date.now() - started} ms, master ${victim} killed at +${killedAt - started} ms, replica promoted at +${promotedAt - started} ms;`,
      Object.fromEntries(kinds),
      `${ran.size} keys executed`,
    );
  }, 60_000);
});

/** The port of the master serving `slot`, as the cluster's nodes see it now. */
async function masterOf(slot: number): Promise<number> {
  const ports = await cluster.masters();
  for (const port of ports) {
    const owned = (await cluster.cli(port, 'CLUSTER', 'COUNTKEYSINSLOT', String(slot))).trim();
    const nodes = await cluster.cli(port, 'CLUSTER', 'NODES');
    const mine = nodes.split('\n').find((line) => line.includes('myself'));
    void owned;
    if (!mine) continue;
    const ranges = mine.split(' ').slice(8);
    for (const range of ranges) {
      const [low, high] = range.split('-').map(Number);
      if (low !== undefined && slot >= low && slot <= (high ?? low)) return port;
    }
  }
  throw new Error(`no master serves slot ${slot}`);
}
