/**
 * Duplicate storms: the same intent sent N times one after another and M times at once (and
 * optionally from K child processes at once), then the user's own effect counter asked how many
 * effects happened. One is the promise; anything else fails with the report.
 */
import { InvalidArgumentError } from '../core/errors.js';
import { type CallerOutcome, gotOf, outcomeOf, READY_LINE, RESULT_LINE, table, tally } from './outcome.js';
import { type ChildTarget, parseOutcomes, startChild } from './spawn.js';

/** Options of `storm`. */
export interface StormOptions<R> {
  /** A name for the report, e.g. 'POST /orders'. */
  name?: string;
  /** One call of the intent, the same every time: a plain function, a `wrap`ped one, a fetch of a route, a tool call. */
  run: (caller: number) => Promise<R> | R;
  /** Calls one after another, each after the one before settled. Default 3. */
  sequential?: number;
  /** Calls started at once, after the sequential ones. Default 10. */
  concurrent?: number;
  /** Child processes each making `concurrent` calls at once with the others (needs `child`). Default 0. */
  processes?: number;
  /** What the child processes run: a module exporting `(input, caller) => result`. */
  child?: ChildTarget;
  /** The user's own count of effects (rows, charges, mails): read once, after every call settled. */
  effects: () => number | Promise<number>;
  /** How many effects the storm must leave. Default 1. */
  expect?: number;
  /** How often the body ran, if the user counts it (else the report counts executions it saw). */
  ran?: () => number | Promise<number>;
}

/** What a storm did: every caller's outcome, the effects, how often the body ran. */
export interface StormReport {
  name: string;
  calls: CallerOutcome[];
  /** What the callers got, counted: { executed: 1, replayed: 12, IN_PROGRESS: 3 }. */
  got: Record<string, number>;
  effects: number;
  expected: number;
  /** How often the body ran: the user's `ran`, else the executions the callers saw. */
  bodyRan: number;
  ok: boolean;
  /** The report as a table, one row per caller. */
  table: string;
}

/** A storm (or crash test) that left the wrong number of effects; `report` has every outcome. */
export class StormFailedError<T = StormReport> extends Error {
  constructor(
    message: string,
    readonly report: T,
  ) {
    super(message);
    this.name = 'StormFailedError';
  }
}

/**
 * Runs a duplicate storm and throws StormFailedError unless it left `expect` effects.
 * @example const report = await storm({ run: () => charge({ orderId: 'ORD-1' }), effects: () => gateway.effects.length });
 */
export async function storm<R>(options: StormOptions<R>): Promise<StormReport> {
  const { run, sequential = 3, concurrent = 10, processes = 0, child, effects, expect = 1 } = options;
  for (const [name, n] of Object.entries({ sequential, concurrent, processes }))
    if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError(`${name} must be a whole number, got ${n}`);
  if (processes > 0 && !child) throw new InvalidArgumentError('processes need child: { module, export }');
  if (typeof effects !== 'function') throw new InvalidArgumentError('effects must be a function counting effects');
  const calls: CallerOutcome[] = [];
  let caller = 0;
  for (let i = 0; i < sequential; i++) {
    const [settled] = await Promise.allSettled([Promise.resolve().then(() => run(caller))]);
    calls.push(outcomeOf(caller++, 'sequential', settled as PromiseSettledResult<unknown>));
  }
  const children = child && processes > 0 ? await startStormChildren(child, processes, concurrent, caller) : [];
  const local = Array.from({ length: concurrent }, (_, i) => Promise.resolve().then(() => run(caller + i)));
  for (const c of children) c.child.stdin.write('go\n');
  const settled = await Promise.allSettled(local);
  calls.push(...settled.map((s, i) => outcomeOf(caller + i, 'concurrent', s)));
  for (const c of children) calls.push(...parseOutcomes(await c.line(RESULT_LINE)));
  const count = await effects();
  const got = tally(calls);
  const bodyRan = options.ran ? await options.ran() : calls.filter((c) => c.replayed === false).length;
  const name = options.name ?? 'storm';
  const report: StormReport = {
    name,
    calls,
    got,
    effects: count,
    expected: expect,
    bodyRan,
    ok: count === expect,
    table: `${name}: ${count} effect(s), expected ${expect}; body ran ${bodyRan}; ${summary(got)}\n${table(
      ['caller', 'phase', 'got', 'value'],
      calls.map((c) => [String(c.caller), c.phase, gotOf(c), short(c.ok ? c.value : c.message)]),
    )}`,
  };
  if (!report.ok)
    throw new StormFailedError(
      `${name}: ${count} effects where ${expect} was expected, after ${calls.length} calls (${summary(got)})\n${report.table}`,
      report,
    );
  return report;
}

async function startStormChildren(target: ChildTarget, processes: number, calls: number, first: number) {
  const children = Array.from({ length: processes }, (_, k) =>
    startChild(target, { mode: 'calls', calls, process: k + 1, firstCaller: first + calls * (k + 1) }),
  );
  await Promise.all(children.map((c) => c.line(READY_LINE)));
  return children;
}

/** 'executed 1, replayed 12'. */
export function summary(got: Record<string, number>): string {
  return Object.entries(got)
    .map(([k, n]) => `${k} ${n}`)
    .join(', ');
}

function short(value: unknown): string {
  const text = value === undefined ? '' : typeof value === 'string' ? value : JSON.stringify(value);
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}
