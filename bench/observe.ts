/**
 * The observability part of `npm run bench` (BENCH_ONLY=observe runs it alone): the engine on each
 * store observed beside the same engine with all of it off (`metrics: false`, `tracer: false`, no
 * hook), measured in alternation in the same run.
 *
 * - observed: its metrics and a decision hook, with the OpenTelemetry API loaded and no provider
 *   registered (an application that does not trace). Target at least 0.95x on first executions and
 *   on replays on every store: what oncely itself adds.
 * - sampled 10%, all spans: the same with an SDK tracer provider (batch processor) sampling 10% of
 *   traces, and recording every one. Reported with the CPU they add per operation beside what the
 *   SDK takes for one span on its own, measured in the same run: the SDK's span costs 1-3 µs, up to
 *   a third of a SQLite replay, so no ratio to an untraced engine can hold there (see the README).
 *
 * Environment: BENCH_OBSERVE_ROUNDS (default 3, best kept), and those of the engine part.
 */
import { context } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  AlwaysOnSampler,
  BasicTracerProvider,
  BatchSpanProcessor,
  ParentBasedSampler,
  type ReadableSpan,
  type Sampler,
  type SpanExporter,
  TraceIdRatioBasedSampler,
} from '@opentelemetry/sdk-trace-base';
import { Metrics } from '../src/core/metrics.js';
import { type Observed, postgresSubject, redisSubject, type Subject, sqliteSubject } from './engine.js';
import {
  best,
  type Check,
  envInt,
  formatCheck,
  formatOps,
  markdownTable,
  measure,
  type Timing,
  warmUp,
} from './harness.js';
import { runId, scratchDir } from './setup.js';

const CONCURRENCY = 32;
const ROUNDS = envInt('BENCH_OBSERVE_ROUNDS', 3);
const MAX_MS = envInt('BENCH_MAX_MS', 2_500);
const WARMUP = envInt('BENCH_WARMUP', 500);
const MIN_RATIO = 0.95;

const log = (line: string) => process.stderr.write(`${line}\n`);

type Pair = { first: Timing; replay: Timing };

export interface ObserveResult {
  store: string;
  off: Pair;
  /** Metrics and hook, no tracer provider. */
  on: Pair;
  /** Metrics, hook, 10% of traces sampled. */
  sampled: Pair;
  /** Metrics, hook, every span recorded. */
  all: Pair;
  spans: number;
  decisions: number;
  /** CPU µs the SDK takes for one span with oncely's attributes, outside oncely. */
  sdkSpanUs: number;
}

/** An exporter that takes every span and keeps only their number: the cost measured is the SDK's, not a network's. */
class CountingExporter implements SpanExporter {
  count = 0;
  export(spans: ReadableSpan[], done: (result: { code: 0 }) => void): void {
    this.count += spans.length;
    done({ code: 0 });
  }
  async shutdown(): Promise<void> {}
}

interface Plan {
  store: string;
  n: number;
  open: (observed: Observed, name: string) => Promise<Subject>;
}

export async function runObserve(): Promise<ObserveResult[]> {
  const id = runId();
  const dir = scratchDir();
  // What a traced application has: a context manager, so the function runs inside oncely's span.
  const contextManager = new AsyncLocalStorageContextManager().enable();
  context.setGlobalContextManager(contextManager);
  const plans: Plan[] = [
    { store: 'sqlite', n: 100_000, open: (o, name) => sqliteSubject(dir.path, o, `${name}.db`) },
    { store: 'postgres', n: 50_000, open: (o, name) => postgresSubject(`bench_observe_${name}_${id}`, o) },
    { store: 'redis', n: 150_000, open: (o, name) => redisSubject(`oncely-bench:${id}:observe-${name}:`, o) },
  ];
  const results: ObserveResult[] = [];
  try {
    for (const plan of plans) results.push(await runPlan(plan));
  } finally {
    context.disable();
    dir.remove();
  }
  return results;
}

/** A tracer provider with `sampler`, exporting into `exporter` through a batch processor. */
const providerOf = (sampler: Sampler, exporter: SpanExporter) =>
  new BasicTracerProvider({ sampler, spanProcessors: [new BatchSpanProcessor(exporter)] });

/** CPU µs per span the SDK takes on its own: start with oncely's attributes, rename, set the outcome, end. */
function sdkSpanCost(provider: BasicTracerProvider): number {
  const tracer = provider.getTracer('bench-floor');
  const once = () => {
    const span = tracer.startSpan('oncely.run', {
      attributes: { 'oncely.action': 'bench', 'oncely.surface': 'engine' },
    });
    span.updateName('oncely.replay');
    span.setAttributes({
      'oncely.outcome': 'replayed',
      'oncely.replayed': true,
      'oncely.attempt': 1,
      'oncely.fence': 1,
    });
    span.end();
  };
  for (let i = 0; i < 20_000; i++) once();
  const n = 200_000;
  const before = process.cpuUsage();
  for (let i = 0; i < n; i++) once();
  const cpu = process.cpuUsage(before);
  return (cpu.user + cpu.system) / n;
}

async function runPlan(plan: Plan): Promise<ObserveResult> {
  const exporter = new CountingExporter();
  const sampled = providerOf(new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(0.1) }), exporter);
  const everything = providerOf(new AlwaysOnSampler(), exporter);
  let decisions = 0;
  const hook = () => void decisions++;
  const off = await plan.open({ metrics: false, tracer: false }, 'off');
  const on = await plan.open({ metrics: new Metrics(), onDecision: hook }, 'on');
  const ten = await plan.open({ metrics: new Metrics(), tracer: sampled.getTracer('bench'), onDecision: hook }, 'ten');
  const all = await plan.open(
    { metrics: new Metrics(), tracer: everything.getTracer('bench'), onDecision: hook },
    'all',
  );
  const budget = { n: plan.n, maxMs: MAX_MS, concurrency: CONCURRENCY };
  const subjects = [off, on, ten, all].map((subject, k) => ({
    name: ['off', 'observed', 'sampled 10%', 'all spans'][k] as string,
    subject,
    cursor: WARMUP,
    firsts: [] as Timing[],
    replays: [] as Timing[],
  }));
  try {
    for (const s of subjects) {
      await warmUp(s.subject.first, WARMUP, CONCURRENCY, 0);
      await warmUp(s.subject.replay, WARMUP, CONCURRENCY, 0);
    }
    for (let round = 0; round < ROUNDS; round++) {
      // Alternate which goes first, so drift of the machine hits both alike.
      const order = round % 2 === 0 ? subjects : [...subjects].reverse();
      for (const s of order) {
        const first = await measure(s.subject.first, budget, s.cursor);
        const replay = await measure(s.subject.replay, budget, s.cursor, first.ops);
        s.cursor += first.ops;
        s.firsts.push(first);
        s.replays.push(replay);
        log(
          `observe ${plan.store} ${s.name}: first ${formatOps(first.opsPerSec)} ops/s, replay ${formatOps(replay.opsPerSec)} ops/s`,
        );
      }
    }
    await sampled.forceFlush();
    await everything.forceFlush();
    const pair = (k: number): Pair => {
      const s = subjects[k] as (typeof subjects)[0];
      return { first: best(s.firsts), replay: best(s.replays) };
    };
    return {
      store: plan.store,
      off: pair(0),
      on: pair(1),
      sampled: pair(2),
      all: pair(3),
      spans: exporter.count,
      decisions,
      sdkSpanUs: sdkSpanCost(everything),
    };
  } finally {
    for (const s of subjects) await s.subject.close();
    await sampled.shutdown();
    await everything.shutdown();
  }
}

type Checked = Check & { name: string; store: string };

export function observeReport(results: ObserveResult[]): { lines: string[]; checks: Checked[] } {
  const checks: Checked[] = [];
  // CPU µs per operation a traced subject adds, beside one span of the SDK's own.
  const extraUs = (traced: Timing, off: Timing) => (traced.cpuUs - off.cpuUs).toFixed(1);
  const rows = results.map((r) => {
    const first: Check = { ratio: r.on.first.opsPerSec / r.off.first.opsPerSec, min: MIN_RATIO };
    const replay: Check = { ratio: r.on.replay.opsPerSec / r.off.replay.opsPerSec, min: MIN_RATIO };
    checks.push({ name: 'observed/off first', store: r.store, ...first });
    checks.push({ name: 'observed/off replay', store: r.store, ...replay });
    const ratio = (a: Timing, b: Timing) => `${(a.opsPerSec / b.opsPerSec).toFixed(2)}x`;
    return [
      r.store,
      formatOps(r.off.first.opsPerSec),
      formatOps(r.on.first.opsPerSec),
      formatCheck(first),
      formatOps(r.off.replay.opsPerSec),
      formatOps(r.on.replay.opsPerSec),
      formatCheck(replay),
      `${ratio(r.sampled.first, r.off.first)} / ${ratio(r.sampled.replay, r.off.replay)}`,
      `${ratio(r.all.first, r.off.first)} / ${ratio(r.all.replay, r.off.replay)}`,
      `+${extraUs(r.sampled.first, r.off.first)} / +${extraUs(r.sampled.replay, r.off.replay)}`,
      `+${extraUs(r.all.first, r.off.first)} / +${extraUs(r.all.replay, r.off.replay)}`,
      r.sdkSpanUs.toFixed(1),
    ];
  });
  const header = [
    'store',
    'first off',
    'first on',
    'on/off',
    'replay off',
    'replay on',
    'on/off',
    'sampled 10%/off',
    'all spans/off',
    'CPU µs added, sampled',
    'CPU µs added, all spans',
    'SDK µs per span',
  ];
  return {
    lines: [
      `observability: "on" = metrics and a decision hook, no tracer provider; "off" = none. Then an SDK tracer (batch`,
      `processor) sampling 10% of traces, and one recording all (first / replay; CPU µs per operation, this process).`,
      `ops/s, best of ${ROUNDS}; ${results.reduce((n, r) => n + r.spans, 0).toLocaleString('en-US')} spans exported, ${results.reduce((n, r) => n + r.decisions, 0).toLocaleString('en-US')} decisions hooked`,
      '',
      markdownTable(header, rows),
    ],
    checks,
  };
}
