/**
 * The observability part of `npm run bench` (BENCH_ONLY=observe runs it alone): the engine on each
 * store with everything observed (its own metrics, a recording OpenTelemetry tracer whose spans go
 * through a batch processor, and a decision hook) beside the same engine with all of it off
 * (`metrics: false`, `tracer: false`, no hook), measured in alternation in the same run. Target: at
 * least 0.95x on first executions and on replays on every store.
 *
 * Environment: BENCH_OBSERVE_ROUNDS (default 3, best kept), and those of the engine part.
 */
import { context } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  BatchSpanProcessor,
  type ReadableSpan,
  type SpanExporter,
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

export interface ObserveResult {
  store: string;
  off: { first: Timing; replay: Timing };
  on: { first: Timing; replay: Timing };
  spans: number;
  decisions: number;
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

async function runPlan(plan: Plan): Promise<ObserveResult> {
  const exporter = new CountingExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new BatchSpanProcessor(exporter)] });
  let decisions = 0;
  const off = await plan.open({ metrics: false, tracer: false }, 'off');
  const parts = (process.env.BENCH_OBSERVE_PARTS ?? 'metrics,tracer,hook').split(',');
  const on = await plan.open(
    {
      metrics: parts.includes('metrics') ? new Metrics() : false,
      tracer: parts.includes('tracer') ? provider.getTracer('bench') : false,
      ...(parts.includes('hook') ? { onDecision: () => void decisions++ } : {}),
    },
    'on',
  );
  const budget = { n: plan.n, maxMs: MAX_MS, concurrency: CONCURRENCY };
  const subjects = [
    { name: 'off', subject: off, cursor: WARMUP, firsts: [] as Timing[], replays: [] as Timing[] },
    { name: 'on', subject: on, cursor: WARMUP, firsts: [] as Timing[], replays: [] as Timing[] },
  ];
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
    await provider.forceFlush();
    const [o, n] = subjects as [(typeof subjects)[0], (typeof subjects)[0]];
    return {
      store: plan.store,
      off: { first: best(o.firsts), replay: best(o.replays) },
      on: { first: best(n.firsts), replay: best(n.replays) },
      spans: exporter.count,
      decisions,
    };
  } finally {
    await off.close();
    await on.close();
    await provider.shutdown();
  }
}

type Checked = Check & { name: string; store: string };

export function observeReport(results: ObserveResult[]): { lines: string[]; checks: Checked[] } {
  const checks: Checked[] = [];
  const rows = results.map((r) => {
    const first: Check = { ratio: r.on.first.opsPerSec / r.off.first.opsPerSec, min: MIN_RATIO };
    const replay: Check = { ratio: r.on.replay.opsPerSec / r.off.replay.opsPerSec, min: MIN_RATIO };
    checks.push({ name: 'observed/off first', store: r.store, ...first });
    checks.push({ name: 'observed/off replay', store: r.store, ...replay });
    return [
      r.store,
      formatOps(r.off.first.opsPerSec),
      formatOps(r.on.first.opsPerSec),
      formatCheck(first),
      formatOps(r.off.replay.opsPerSec),
      formatOps(r.on.replay.opsPerSec),
      formatCheck(replay),
      r.spans.toLocaleString('en-US'),
    ];
  });
  const header = ['store', 'first off', 'first on', 'on/off', 'replay off', 'replay on', 'on/off', 'spans'];
  return {
    lines: [
      `observability: metrics, a recording tracer (batch processor) and a decision hook on, beside all off; ops/s, best of ${ROUNDS}`,
      '',
      markdownTable(header, rows),
    ],
    checks,
  };
}
