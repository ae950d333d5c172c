/**
 * The cluster part of `npm run bench` (`BENCH_ONLY=cluster`): the Redis store on a local Redis
 * Cluster (3 masters, 3 replicas, started here on loopback) beside the same store on the one Redis
 * at REDIS_URL, in the same run: first executions (new keys) and replays, at concurrency 32, best
 * of BENCH_ROUNDS interleaved rounds. Also the cluster with `replicas: 1` (WAIT after every writing
 * script run), to show what the durability over a failover costs. No target: on one machine the
 * nodes share its cores, so the ratios say what the cluster costs here, not how it scales.
 */
import { randomUUID } from 'node:crypto';
import { createOncely } from '../src/engine/engine.js';
import { redisStore } from '../src/redis/index.js';
import type { RecordStore } from '../src/store.js';
import { startCluster } from '../test/support/redis-cluster.js';
import { inputOf, redisSubject } from './engine.js';
import { best, envInt, formatOps, markdownTable, measure, type Timing, warmUp } from './harness.js';
import { ACTION, TENANT } from './setup.js';

const CONCURRENCY = 32;
const ROUNDS = envInt('BENCH_ROUNDS', 3);
const budget = { n: envInt('BENCH_N', 150_000), maxMs: envInt('BENCH_MAX_MS', 2_500), concurrency: CONCURRENCY };
const log = (line: string) => process.stderr.write(`${line}\n`);

/** First executions and replays through the engine on `store`, keys `k<i>`. */
async function subject(store: RecordStore) {
  const once = await createOncely({ store, tenant: TENANT });
  const call = (i: number) =>
    once.run({ action: ACTION, key: `k${i}`, input: inputOf(i) }, () => ({ ok: true as const, id: i }));
  return {
    first: async (i: number) => {
      if ((await call(i)).replayed) throw new Error(`key k${i} was not new`);
    },
    replay: async (i: number) => {
      if (!(await call(i)).replayed) throw new Error(`key k${i} was not replayed`);
    },
    close: () => once.close(),
  };
}

/** One subject's best first executions and replays, beside the one Redis's of the same run. */
export interface ClusterResult {
  name: string;
  first: Timing;
  replay: Timing;
}

export async function runCluster(): Promise<ClusterResult[]> {
  const cluster = await startCluster();
  const prefix = `oncely-bench:${randomUUID().slice(0, 8)}:`;
  const subjects = [
    // Its keys are deleted from the shared Redis after the run (the cluster goes with its folder).
    { name: 'one Redis', open: () => redisSubject(prefix) },
    { name: 'cluster, 3 masters', open: () => subject(redisStore({ cluster: cluster.nodes, prefix })) },
    {
      name: 'cluster, 3 masters, replicas: 1',
      open: () => subject(redisStore({ cluster: cluster.nodes, prefix: `${prefix}wait:`, replicas: 1 })),
    },
  ];
  const opened = [];
  try {
    for (const s of subjects)
      opened.push({ ...s, subject: await s.open(), cursor: 500, firsts: [] as Timing[], replays: [] as Timing[] });
    for (const s of opened) {
      await warmUp(s.subject.first, 500, CONCURRENCY, 0);
      await warmUp(s.subject.replay, 500, CONCURRENCY, 0);
    }
    for (let round = 0; round < ROUNDS; round++) {
      for (const s of opened) {
        const first = await measure(s.subject.first, budget, s.cursor);
        const replay = await measure(s.subject.replay, budget, s.cursor, first.ops);
        s.cursor += first.ops;
        s.firsts.push(first);
        s.replays.push(replay);
        log(`${s.name}: first ${formatOps(first.opsPerSec)} ops/s, replay ${formatOps(replay.opsPerSec)} ops/s`);
      }
    }
    return opened.map((s) => ({ name: s.name, first: best(s.firsts), replay: best(s.replays) }));
  } finally {
    for (const s of opened) await s.subject.close();
    await cluster.stop();
  }
}

/** The part's table: each subject's ops/s and its ratios to the one Redis of the same run. */
export function clusterReport(results: ClusterResult[]): string[] {
  const base = results[0] as ClusterResult;
  const rows = results.map((r) => [
    r.name,
    formatOps(r.first.opsPerSec),
    formatOps(r.replay.opsPerSec),
    `${(r.first.opsPerSec / base.first.opsPerSec).toFixed(2)}x`,
    `${(r.replay.opsPerSec / base.replay.opsPerSec).toFixed(2)}x`,
  ]);
  return [
    `Redis Cluster (3 masters, 3 replicas, local) beside one Redis, concurrency ${CONCURRENCY}, best of ${ROUNDS} rounds:`,
    '',
    markdownTable(['subject', 'first ops/s', 'replay ops/s', 'first vs one Redis', 'replay vs one Redis'], rows),
  ];
}
