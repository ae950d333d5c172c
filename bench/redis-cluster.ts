/**
 * The Redis store on a local Redis Cluster (3 masters, 3 replicas, started here on loopback) beside
 * the same store on the one Redis at REDIS_URL, in the same run: first executions (new keys) and
 * replays, at concurrency 32 (as `npm run bench`), best of BENCH_ROUNDS interleaved rounds. Also
 * the cluster with `replicas: 1` (WAIT after every writing script run), to show what the durability
 * over a failover costs. Run: `npx tsx bench/redis-cluster.ts` (BENCH_MAX_MS, BENCH_ROUNDS, BENCH_N).
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

const cluster = await startCluster();
const prefix = `oncely-bench:${randomUUID().slice(0, 8)}:`;
try {
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
  const base = opened[0] as (typeof opened)[number];
  const rows = opened.map((s) => {
    const first = best(s.firsts).opsPerSec;
    const replay = best(s.replays).opsPerSec;
    return [
      s.name,
      formatOps(first),
      formatOps(replay),
      `${(first / best(base.firsts).opsPerSec).toFixed(2)}x`,
      `${(replay / best(base.replays).opsPerSec).toFixed(2)}x`,
    ];
  });
  process.stdout.write(
    `${markdownTable(['subject', 'first ops/s', 'replay ops/s', 'first vs one Redis', 'replay vs one Redis'], rows)}\n`,
  );
  for (const s of opened) await s.subject.close();
} finally {
  await cluster.stop();
}
