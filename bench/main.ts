/**
 * `npm run bench`: oncely on SQLite, PostgreSQL, MySQL and Redis against the floor of each store (the two
 * bare statements an operation needs) and against Powertools idempotency on Redis, measured in
 * the same run, at concurrency 32. Prints a markdown table; `--json` prints JSON instead.
 *
 * Then the HTTP part (bench/http.ts): each framework bare, with the Idempotency-Key middleware on
 * unique keys and on replays, against the engine's own run.
 *
 * Then the observability part (bench/observe.ts): the engine observed (metrics, tracer, hook) beside
 * the same engine with all of it off.
 *
 * Then the flows part (bench/flows.ts): durable flows of three steps, oncely on PostgreSQL and
 * SQLite beside DBOS Transact on the same PostgreSQL.
 *
 * Then the brokers part (bench/brokers.ts): inbox and outbox relay throughput on NATS JetStream,
 * RabbitMQ and Redis Streams, on SQLite and PostgreSQL, beside a bare consumer and a bare relay.
 *
 * Then the cluster part (bench/redis-cluster.ts): the Redis store on a local Redis Cluster of 3
 * masters beside one Redis. BENCH_ONLY=engine, observe, http, flows, brokers or cluster runs one
 * part only.
 *
 * Environment: BENCH_N (most ops per measurement), BENCH_MAX_MS (longest measurement, default
 * 2500), BENCH_ROUNDS (default 3, best kept), BENCH_WARMUP, BENCH_MEMORY_KEYS, BENCH_JSON (also
 * write the JSON to this file), BENCH_ENGINE_STORES (comma list of the engine part's stores, default
 * sqlite,postgres,mysql,redis), PG_URL or DATABASE_URL, REDIS_URL.
 */
import { writeFileSync } from 'node:fs';
import { type BrokersResult, brokersReport, runBrokers } from './brokers.js';
import { mysqlSubject, postgresSubject, redisSubject, type Subject, sqliteSubject } from './engine.js';
import { type Floor, mysqlFloor, nodeRedisFloor, postgresFloor, redisFloor, sqliteFloor } from './floors.js';
import { type FlowsResult, flowsReport, runFlows } from './flows.js';
import {
  type Budget,
  best,
  type Check,
  envInt,
  formatCheck,
  formatOps,
  markdownTable,
  measure,
  type ServerCpu,
  type Timing,
  warmUp,
} from './harness.js';
import { type HttpResult, type HttpRun, runHttp } from './http.js';
import { httpReport } from './http-report.js';
import { type MemoryResult, measureMemory } from './memory.js';
import { type ObserveResult, observeReport, runObserve } from './observe.js';
import { powertoolsSubject } from './powertools.js';
import { type ClusterResult, clusterReport, runCluster } from './redis-cluster.js';
import { redisCpu, runId, scratchDir } from './setup.js';

const CONCURRENCY = 32;
const ROUNDS = envInt('BENCH_ROUNDS', 3);
const MAX_MS = envInt('BENCH_MAX_MS', 2_500);
const WARMUP = envInt('BENCH_WARMUP', 500);
const MEMORY_KEYS = envInt('BENCH_MEMORY_KEYS', 50_000);
const JSON_OUT = process.argv.includes('--json');
const ONLY = process.env.BENCH_ONLY;

/** Ops per measurement unless BENCH_N says otherwise; MAX_MS stops a slow one earlier. */
const budget = (n: number): Budget => ({ n: envInt('BENCH_N', n), maxMs: MAX_MS, concurrency: CONCURRENCY });

const log = (line: string) => process.stderr.write(`${line}\n`);

interface Result {
  store: string;
  floor?: Timing;
  /** The same floor through another driver, reported beside the target floor. */
  reference?: { name: string; timing: Timing };
  first: Timing;
  replay: Timing;
}

/** What runs on one store: its floor, the subjects that share it, and how to clean up. */
interface Plan {
  store: string;
  n: number;
  floor: () => Promise<Floor>;
  /** The floor's statements through another driver: measured each round, printed, no target. */
  reference?: { name: string; open: () => Promise<Floor> };
  subjects: { name: string; open: () => Promise<Subject> }[];
  cleanup?: () => void;
  /** The server's cumulative CPU µs, where it can be read (Redis). */
  serverCpu?: ServerCpu;
}

/** Alternates floor, first runs and replays for ROUNDS rounds, so drift hits all alike; keeps the best. */
async function runPlan(plan: Plan): Promise<Result[]> {
  const b = budget(plan.n);
  const floor = await plan.floor();
  const reference = plan.reference ? await plan.reference.open() : undefined;
  const subjects = [];
  for (const s of plan.subjects) subjects.push({ ...s, subject: await s.open(), cursor: WARMUP });
  try {
    await warmUp(floor.op, WARMUP, CONCURRENCY, 10_000_000);
    if (reference) await warmUp(reference.op, WARMUP, CONCURRENCY, 10_000_000);
    for (const { subject } of subjects) {
      await warmUp(subject.first, WARMUP, CONCURRENCY, 0);
      await warmUp(subject.replay, WARMUP, CONCURRENCY, 0);
    }
    const floors: Timing[] = [];
    const references: Timing[] = [];
    const firsts = subjects.map(() => [] as Timing[]);
    const replays = subjects.map(() => [] as Timing[]);
    let floorCursor = 0;
    for (let round = 0; round < ROUNDS; round++) {
      const f = await measure(floor.op, b, floorCursor, undefined, plan.serverCpu);
      floorCursor += f.ops;
      floors.push(f);
      log(`${plan.store} floor: ${formatOps(f.opsPerSec)} ops/s (${f.ops} ops)`);
      if (reference && plan.reference) {
        const r = await measure(reference.op, b, floorCursor, undefined, plan.serverCpu);
        floorCursor += r.ops;
        references.push(r);
        log(`${plan.store} ${plan.reference.name}: ${formatOps(r.opsPerSec)} ops/s`);
      }
      for (const [k, s] of subjects.entries()) {
        const first = await measure(s.subject.first, b, s.cursor, undefined, plan.serverCpu);
        const replay = await measure(s.subject.replay, b, s.cursor, first.ops, plan.serverCpu);
        s.cursor += first.ops;
        firsts[k]?.push(first);
        replays[k]?.push(replay);
        log(`${s.name}: first ${formatOps(first.opsPerSec)} ops/s, replay ${formatOps(replay.opsPerSec)} ops/s`);
      }
    }
    return subjects.map((s, k) => ({
      store: s.name,
      floor: k === 0 ? best(floors) : undefined,
      reference: k === 0 && plan.reference ? { name: plan.reference.name, timing: best(references) } : undefined,
      first: best(firsts[k] ?? []),
      replay: best(replays[k] ?? []),
    }));
  } finally {
    await floor.close();
    await reference?.close();
    for (const { subject } of subjects) await subject.close();
    plan.cleanup?.();
  }
}

const PARTS = ['engine', 'observe', 'http', 'flows', 'brokers', 'cluster'];

async function main(): Promise<void> {
  if (ONLY !== undefined && !PARTS.includes(ONLY))
    throw new Error(`BENCH_ONLY must be one of ${PARTS.join(', ')}, got ${ONLY}`);
  const started = Date.now();
  const engine = ONLY === undefined || ONLY === 'engine' ? await runEngine() : undefined;
  const observe = ONLY === undefined || ONLY === 'observe' ? await runObserve() : undefined;
  const http = ONLY === undefined || ONLY === 'http' ? await runHttp() : undefined;
  const flows = ONLY === undefined || ONLY === 'flows' ? await runFlows() : undefined;
  const brokers = ONLY === undefined || ONLY === 'brokers' ? await runBrokers() : undefined;
  const cluster = ONLY === undefined || ONLY === 'cluster' ? await runCluster() : undefined;
  report(engine, observe, http, flows, brokers, cluster, Date.now() - started);
}

/** The engine part: every store's plan, and memory per key on SQLite. */
async function runEngine(): Promise<{ results: Result[]; memory: MemoryResult | undefined }> {
  const id = runId();
  const dir = scratchDir();
  const redis = await redisCpu();
  const plans: Plan[] = [
    {
      store: 'sqlite',
      n: 100_000,
      floor: async () => sqliteFloor(dir.path),
      subjects: [{ name: 'oncely sqlite (file)', open: () => sqliteSubject(dir.path) }],
    },
    {
      store: 'postgres',
      n: 50_000,
      floor: () => postgresFloor(`bench_floor_${id}`),
      subjects: [{ name: 'oncely postgres', open: () => postgresSubject(`bench_oncely_${id}`) }],
    },
    {
      store: 'mysql',
      n: 50_000,
      floor: () => mysqlFloor(`bench_floor_${id}`),
      subjects: [{ name: 'oncely mysql', open: () => mysqlSubject(`bench_oncely_${id}`) }],
    },
    {
      store: 'redis',
      n: 150_000,
      floor: () => redisFloor(`oncely-bench:${id}:floor:`),
      reference: { name: 'floor through node-redis', open: () => nodeRedisFloor(`oncely-bench:${id}:node-redis:`) },
      subjects: [
        { name: 'oncely redis', open: () => redisSubject(`oncely-bench:${id}:oncely:`) },
        { name: 'powertools redis', open: () => powertoolsSubject(`oncely-bench:${id}:powertools`) },
      ],
      serverCpu: redis.read,
    },
  ];
  const results: Result[] = [];
  let memory: MemoryResult | undefined;
  const stores = process.env.BENCH_ENGINE_STORES?.split(',');
  try {
    for (const plan of plans.filter((p) => !stores || stores.includes(p.store))) {
      results.push(...(await runPlan(plan)));
      // Right after the SQLite runs, before any Redis client: node-redis keeps a 5 s
      // AbortSignal.timeout per command alive, and their release would show up as heap shrinking.
      if (plan.store === 'sqlite') memory = await measureMemory(MEMORY_KEYS, CONCURRENCY);
    }
  } finally {
    dir.remove();
    await redis.close();
  }
  if (!memory && (!stores || stores.includes('sqlite'))) throw new Error('the memory measurement did not run');
  return { results, memory };
}

type Checked = Check & { name: string; store: string };

function report(
  engine: { results: Result[]; memory: MemoryResult | undefined } | undefined,
  observeResults: ObserveResult[] | undefined,
  httpRun: HttpRun | undefined,
  flowsResults: FlowsResult[] | undefined,
  brokersResults: BrokersResult[] | undefined,
  clusterResults: ClusterResult[] | undefined,
  ms: number,
): void {
  const part = engine ? engineReport(engine.results, engine.memory) : undefined;
  const observe = observeResults ? observeReport(observeResults) : undefined;
  const http = httpRun ? httpReport(httpRun) : undefined;
  const flows = flowsResults ? flowsReport(flowsResults) : undefined;
  const brokers = brokersResults ? brokersReport(brokersResults) : undefined;
  const checks = [
    ...(part?.checks ?? []),
    ...(observe?.checks ?? []),
    ...(http?.checks ?? []),
    ...(flows?.checks ?? []),
    ...(brokers?.checks ?? []),
  ];
  const failed = checks.filter((c) => !(c.ratio >= c.min));
  // A wrong response is a broken middleware, not a slow one: the bench fails whatever the speed.
  if (http && http.failures.length > 0) process.exitCode = 1;
  const json = {
    config: { concurrency: CONCURRENCY, rounds: ROUNDS, maxMs: MAX_MS, warmup: WARMUP, node: process.version },
    results: engine?.results,
    memory: engine?.memory,
    observe: observeResults,
    http: httpRun?.results.map((r) => ({
      ...r,
      bare: strip(r.bare),
      unique: strip(r.unique),
      replay: strip(r.replay),
      cached: strip(r.cached),
    })),
    httpPeers: httpRun?.peers && {
      bare: strip(httpRun.peers.bare),
      subjects: httpRun.peers.subjects.map((s) => ({ ...s, unique: strip(s.unique), replay: strip(s.replay) })),
    },
    httpFailures: http?.failures,
    flows: flowsResults,
    brokers: brokersResults,
    cluster: clusterResults,
    checks: checks.map((c) => ({ ...c, pass: c.ratio >= c.min })),
    totalMs: ms,
  };
  if (process.env.BENCH_JSON) writeFileSync(process.env.BENCH_JSON, `${JSON.stringify(json, null, 2)}\n`);
  if (JSON_OUT) {
    process.stdout.write(`${JSON.stringify(json, null, 2)}\n`);
    return;
  }
  const cluster = clusterResults ? clusterReport(clusterResults) : undefined;
  const sections = [part?.lines, observe?.lines, http?.lines, flows?.lines, brokers?.lines, cluster].filter(
    (l): l is string[] => l !== undefined,
  );
  const lines = sections.flatMap((l, k) => (k === 0 ? l : ['', ...l]));
  lines.push(
    '',
    failed.length === 0
      ? `all ${checks.length} targets pass (${(ms / 1000).toFixed(0)} s)`
      : `${failed.length} of ${checks.length} targets FAIL: ${failed.map((c) => `${c.store} ${c.name}`).join(', ')} (${(ms / 1000).toFixed(0)} s)`,
  );
  if (http && http.failures.length > 0) lines.push('HTTP correctness FAILED (see above): exit code 1');
  process.stdout.write(`${lines.join('\n')}\n`);
}

/** A load result without its sample of problem messages (which the failures list already has). */
const strip = ({ problems: _problems, ...rest }: HttpResult['bare']) => rest;

function engineReport(results: Result[], memory: MemoryResult | undefined): { lines: string[]; checks: Checked[] } {
  const row = (name: string) => results.find((r) => r.store === name);
  const powertools = row('powertools redis');
  const checks: Checked[] = [];
  const rows = results.map((r) => {
    const floor = r.floor?.opsPerSec;
    const isOncely = r.store.startsWith('oncely');
    const cells = [r.store, formatOps(floor), formatOps(r.first.opsPerSec), formatOps(r.replay.opsPerSec)];
    if (!isOncely) return [...cells, '—', `${(r.replay.opsPerSec / r.first.opsPerSec).toFixed(2)}x`, '—'];
    const firstFloor: Check = {
      ratio: r.first.opsPerSec / (floor ?? Number.NaN),
      min: 1,
      // The coalescing SQL stores aim past the floor: PostgreSQL 2.5x, MySQL 2x (issue 22).
      goal: r.store.includes('postgres') ? 2.5 : r.store.includes('mysql') ? 2 : undefined,
    };
    const replayFirst: Check = { ratio: r.replay.opsPerSec / r.first.opsPerSec, min: 2 };
    checks.push({ name: 'first/floor', store: r.store, ...firstFloor });
    checks.push({ name: 'replay/first', store: r.store, ...replayFirst });
    let vsPowertools = '—';
    if (r.store === 'oncely redis' && powertools) {
      const check: Check = { ratio: r.first.opsPerSec / powertools.first.opsPerSec, min: 1.3 };
      checks.push({ name: 'first/powertools', store: r.store, ...check });
      vsPowertools = formatCheck(check);
    }
    return [...cells, formatCheck(firstFloor), formatCheck(replayFirst), vsPowertools];
  });
  const header = ['subject', 'floor ops/s', 'first ops/s', 'replay ops/s', 'first/floor', 'replay/first'];
  const table = markdownTable([...header, 'first vs Powertools'], rows);
  // The other driver's floor, against the first executions of the subject it was measured beside.
  const references = results.flatMap((r) =>
    r.reference
      ? [
          `${r.store}: ${r.reference.name} ${formatOps(r.reference.timing.opsPerSec)} ops/s (first/that floor ` +
            `${(r.first.opsPerSec / r.reference.timing.opsPerSec).toFixed(2)}x, for information)`,
        ]
      : [],
  );
  const lines = [
    `oncely benchmarks: concurrency ${CONCURRENCY}, best of ${ROUNDS} rounds, each ≤ ${MAX_MS} ms or N ops, node ${process.version}`,
    '',
    table,
    '',
    `first = new keys (claim, run, store the result); replay = the same keys again; floor = the two bare statements`,
    `(claim insert, result update) per operation through the same driver and settings (Redis: ioredis, as`,
    `redisStore({ url }) uses). Ratios are of ops/s.`,
    ...references,
    '',
    'CPU per operation, µs (this process + Redis), of the round kept. Where the two work at the same time,',
    'ops/s follows the larger; where they take turns, the sum:',
    '',
    cpuTable(results),
    ...(memory
      ? [
          '',
          `memory (oncely sqlite): heap ${signed(memory.heapDeltaPer10kKeys / 1024)} KiB per 10,000 unique keys over` +
            ` ${memory.keys.toLocaleString('en-US')} keys (heap ${mib(memory.heapBefore)} -> ${mib(memory.heapAfter)} MiB; ${memory.gc})`,
        ]
      : []),
  ];
  return { lines, checks };
}

/** Where each subject's CPU goes per operation: this process, and the server where it was read. */
function cpuTable(results: Result[]): string {
  const cell = (t: Timing | undefined) =>
    t === undefined
      ? '—'
      : `${t.cpuUs.toFixed(1)}${t.serverCpuUs === undefined ? '' : ` + ${t.serverCpuUs.toFixed(1)}`}`;
  const rows = results.map((r) => [r.store, cell(r.floor), cell(r.first), cell(r.replay)]);
  return markdownTable(['subject', 'floor', 'first', 'replay'], rows);
}

const signed = (x: number) => `${x >= 0 ? '+' : ''}${x.toFixed(1)}`;
const mib = (bytes: number) => (bytes / 1024 / 1024).toFixed(1);

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
