/**
 * The flows part of `npm run bench` (BENCH_ONLY=flows runs it alone): durable flows of three
 * trivial steps at concurrency 32, oncely on PostgreSQL and on SQLite beside DBOS Transact on the
 * same PostgreSQL, in the same run.
 *
 * first = a new business id per flow: start it and await its result (three steps run and are
 * recorded); duplicate = the same ids started again and awaited: each returns the existing flow's
 * result without running a step (checked: the step counter must not move). Target: oncely at least
 * 2x DBOS's flows/s on both, SQLite against DBOS on PostgreSQL (DBOS has no SQLite store).
 *
 * Environment: BENCH_FLOWS_N (most flows per measurement, default 100000), BENCH_FLOWS_MAX_MS
 * (longest measurement, default 3000), BENCH_FLOWS_ROUNDS (default 2, best kept),
 * BENCH_FLOWS_WARMUP (flows per warm-up, default 300), PG_URL or DATABASE_URL.
 */

import { counter, type FlowSubject } from './flows-workload.js';
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

export const FLOWS_CONCURRENCY = 32;
export const FLOWS_N = envInt('BENCH_FLOWS_N', 100_000);
export const FLOWS_MAX_MS = envInt('BENCH_FLOWS_MAX_MS', 3_000);
export const FLOWS_ROUNDS = envInt('BENCH_FLOWS_ROUNDS', 2);
export const FLOWS_WARMUP = envInt('BENCH_FLOWS_WARMUP', 300);
/** The ratio to DBOS the issue asks for, on first and on duplicate starts. */
const TARGET = 2;

const log = (line: string) => process.stderr.write(`${line}\n`);

export interface FlowsResult {
  subject: string;
  first: Timing;
  duplicate: Timing;
}

/** One round of one subject: first starts of new ids from `cursor`, then the same ids again. */
async function round(name: string, subject: FlowSubject, cursor: number): Promise<FlowsResult> {
  const budget = { n: FLOWS_N, maxMs: FLOWS_MAX_MS, concurrency: FLOWS_CONCURRENCY };
  const before = counter.executed;
  const first = await measure(subject.first, budget, cursor);
  const afterFirst = counter.executed;
  if (afterFirst - before !== 3 * first.ops)
    throw new Error(`${name}: ${first.ops} first starts ran ${afterFirst - before} steps, not ${3 * first.ops}`);
  const duplicate = await measure(subject.duplicate, budget, cursor, first.ops);
  if (counter.executed !== afterFirst)
    throw new Error(`${name}: ${duplicate.ops} duplicate starts ran ${counter.executed - afterFirst} steps`);
  log(
    `${name}: first ${formatOps(first.opsPerSec)} flows/s (${first.ops}), ` +
      `duplicate ${formatOps(duplicate.opsPerSec)} starts/s (${duplicate.ops})`,
  );
  return { subject: name, first, duplicate };
}

/**
 * Opens the three subjects, warms each up, then runs the rounds, each round every subject in turn
 * (so drift on a shared machine hits all alike), and keeps each one's best first and duplicate.
 * While one subject is measured the others sit idle: an idle oncely worker polls every 200 ms,
 * DBOS's background loops issue a few statements a second.
 */
export async function runFlows(): Promise<FlowsResult[]> {
  // Loaded here, so the other parts of the bench never load DBOS or register its workflow.
  const { dbosSubject } = await import('./flows-dbos.js');
  const { oncelyPostgresSubject, oncelySqliteSubject } = await import('./flows-oncely.js');
  const id = runId();
  const dir = scratchDir();
  const plans = [
    { name: 'oncely postgres', open: () => oncelyPostgresSubject(`bench_flows_${id}`) },
    { name: 'oncely sqlite', open: () => oncelySqliteSubject(dir.path) },
    { name: 'dbos postgres', open: () => dbosSubject(`bench_dbos_${id}`) },
  ];
  const open: { name: string; subject: FlowSubject; rounds: FlowsResult[] }[] = [];
  try {
    for (const plan of plans) open.push({ name: plan.name, subject: await plan.open(), rounds: [] });
    for (const { subject } of open) {
      // Warm-up ids sit far above the measured ones.
      await warmUp(subject.first, FLOWS_WARMUP, FLOWS_CONCURRENCY, 100_000_000);
      await warmUp(subject.duplicate, FLOWS_WARMUP, FLOWS_CONCURRENCY, 100_000_000);
    }
    let cursor = 0;
    for (let r = 0; r < FLOWS_ROUNDS; r++) {
      for (const s of open) s.rounds.push(await round(s.name, s.subject, cursor));
      // Every subject's next round starts past the ids any subject used in this one.
      cursor += Math.max(...open.map((s) => s.rounds[r]?.first.ops ?? 0));
    }
    return open.map((s) => ({
      subject: s.name,
      first: best(s.rounds.map((x) => x.first)),
      duplicate: best(s.rounds.map((x) => x.duplicate)),
    }));
  } finally {
    for (const { subject } of open) await subject.close().catch((error: unknown) => log(`close: ${String(error)}`));
    dir.remove();
  }
}

/** The markdown table, its notes and the ratio checks. */
export function flowsReport(results: FlowsResult[]): {
  lines: string[];
  checks: (Check & { name: string; store: string })[];
} {
  const dbos = results.find((r) => r.subject.startsWith('dbos'));
  const checks: (Check & { name: string; store: string })[] = [];
  const rows = results.map((r) => {
    const cells = [r.subject, formatOps(r.first.opsPerSec), formatOps(r.duplicate.opsPerSec)];
    if (!dbos || r === dbos) return [...cells, '—', '—'];
    const first: Check = { ratio: r.first.opsPerSec / dbos.first.opsPerSec, min: TARGET };
    const duplicate: Check = { ratio: r.duplicate.opsPerSec / dbos.duplicate.opsPerSec, min: TARGET };
    checks.push({ name: 'flows first/dbos', store: r.subject, ...first });
    checks.push({ name: 'flows duplicate/dbos', store: r.subject, ...duplicate });
    return [...cells, formatCheck(first), formatCheck(duplicate)];
  });
  const header = ['subject', 'first flows/s', 'duplicate starts/s', 'first vs dbos', 'duplicate vs dbos'];
  const lines = [
    `flows: 3 steps, concurrency ${FLOWS_CONCURRENCY}, best of ${FLOWS_ROUNDS} rounds, each ≤ ${FLOWS_MAX_MS} ms or ` +
      `${FLOWS_N.toLocaleString('en-US')} flows, node ${process.version}`,
    '',
    markdownTable(header, rows),
    '',
    'first = a new business id: start the flow and await its result (each step runs once and is recorded);',
    'duplicate = the same ids started again and awaited: the existing flow and its result, no step run again',
    '(checked by counting step executions). oncely: flows.start + flows.result with a worker in the same process;',
    'DBOS Transact: DBOS.startWorkflow(fn, { workflowID }) + handle.getResult(), system database on the same',
    'PostgreSQL. Both pools 10 connections. oncely sqlite is compared with dbos postgres (DBOS has no SQLite).',
  ];
  return { lines, checks };
}
