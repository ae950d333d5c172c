import { backoffDelay, sleep } from '../core/backoff.js';
import { type Duration, toMs } from '../core/duration.js';
import { OncelyError } from '../core/errors.js';
import type { Observer } from '../core/observer.js';
import { endSpan, startSpan, withSpan } from '../core/tracing.js';
import type { Db } from '../db/types.js';
import type { CrashWindow, HookCall, TestHooks } from '../engine/hooks.js';
import { checkResultSize, encodeJson, type StoredError } from '../engine/outcome.js';
import type { Statement } from '../work/index.js';
import type { AnyFlow, FlowRun, StepContext, StepOptions } from './define.js';
import * as q from './sql.js';

/** Thrown through the flow function to stop it: it waits for a signal or a time, or lost its lease. */
export class Suspend extends Error {
  constructor(
    readonly reason: 'waiting' | 'lease_lost',
    readonly wakeAt: number | null = null,
  ) {
    super(`flow suspended: ${reason}`);
  }
}

/** A step that failed for good: its error, as stored. */
export class StepFailed extends OncelyError {
  constructor(
    readonly stepId: string,
    readonly failure: { name: string; message: string; code: string },
  ) {
    super('STEP_FAILED', `step ${stepId} failed: ${failure.message}`);
    this.name = 'StepFailed';
  }
}

interface StepRow {
  step_id: string;
  /** `running`: an attempt began and stored no outcome yet. */
  status: 'running' | 'completed' | 'failed' | 'waiting';
  result: string | null;
  error: string | null;
  attempts: number | string;
  /** The flow's claim count when the row was last written; null on rows older than flows migration 4. */
  run: number | string | null;
  started_at: number | string;
}

/** A step's stored outcome, which a replay answers from (not an attempt in flight or a wait). */
const isMemo = (row: StepRow | undefined) => row?.status === 'completed' || row?.status === 'failed';

/**
 * Failures of a step whose effect happened but whose result cannot be stored: kept when a failed
 * flow is retried (flows.retry), so the retry answers them rather than run the effect again, as
 * the engine replays them.
 */
export const KEPT_FAILURES: ReadonlySet<string> = new Set(['RESULT_NOT_SERIALIZABLE', 'RESULT_TOO_LARGE']);

/** Why an attempt stored as begun has no outcome: the run that began it ended first. */
function interrupted(row: StepRow): StoredError {
  return {
    name: 'LeaseLostError',
    message: `run ${row.run ?? '?'} ended during attempt ${row.attempts} without storing its outcome (its process died, its claim was taken over or its database failed)`,
    code: 'LEASE_LOST',
  };
}

/** What the worker learns from one execution. */
export type ExecutionOutcome =
  | { status: 'completed'; result: unknown }
  | { status: 'failed'; error: { name: string; message: string; code: string } }
  | { status: 'suspended'; reason: 'waiting' | 'lease_lost'; wakeAt: number | null };

function errorOf(error: unknown): StoredError {
  const e = error as { name?: unknown; message?: unknown; code?: unknown };
  return {
    name: typeof e?.name === 'string' ? e.name : 'Error',
    message: typeof e?.message === 'string' ? e.message : String(error),
    code: typeof e?.code === 'string' ? e.code : 'STEP_ERROR',
  };
}

/**
 * The flow's own bookkeeping: when the database fails here, the run stops without deciding anything
 * (not a step failure, no compensation); its lease lapses and a worker resumes it from its stored steps.
 */
async function durable<R>(operation: () => Promise<R>): Promise<R> {
  try {
    return await operation();
  } catch {
    throw new Suspend('lease_lost');
  }
}

/**
 * What the test hooks are told at a flow step's window (oncely/testing's crash windows): the
 * engine's shape, with `action` the flow and step (`<flow>/<step id>`, e.g. `order-fulfilment/pack`),
 * `key` the step's idempotency key, `fence` the run's claim, and the step's try. Flows have no
 * tenant: 'default'.
 */
export interface StepHookCall extends HookCall {
  readonly surface: 'flow';
  readonly workflowId: string;
  readonly stepId: string;
  /** The step's try in this run: 1, more on retries. */
  readonly attempt: number;
}

/** The test hooks of a run, with its claim's current fence. */
export interface RunHooks {
  at: TestHooks;
  fence: () => number;
}

/** A step of the flow, or the compensation of one: counted apart, compensations as compensations. */
type StepKind = 'step' | 'compensation';

/**
 * Runs a flow function once from the top. Completed steps return their stored results, so a
 * replay after a crash or a redeploy continues where the last run stopped. Each step is counted
 * (executed, memoized, retried, failed) and spanned under the active span (the run's); each
 * compensation that runs in this execution is counted once (succeeded or failed), a memoized one
 * not again: it was counted by the run that did it.
 */
export async function executeFlow(
  db: Db,
  flow: AnyFlow,
  workflowId: string,
  input: unknown,
  holds: () => boolean,
  observer: Observer,
  maxResultBytes: number,
  hooks: RunHooks | undefined,
  traceId: string,
): Promise<ExecutionOutcome> {
  const { metrics } = observer;
  const tracer = observer.activeTracer;
  let stepIndex = 0;
  const compensations: { stepId: string; value: unknown; compensate: NonNullable<StepOptions['compensate']> }[] = [];
  const waits = new Map<string, number>();
  const stepContext = (stepId: string, attempt: number): StepContext => {
    const idempotencyKey = `${workflowId}:${stepId}`;
    return { idempotencyKey, workflowId, stepId, attempt, traceId, subKey: (i) => `${idempotencyKey}:${i}` };
  };
  // A step's windows, for crash tests (called only when `hooks` is set): the claim's fence at the
  // moment, the step's key and try.
  const at = (hooks: RunHooks, window: CrashWindow, stepId: string, attempt: number) => {
    const call: StepHookCall = {
      surface: 'flow',
      tenant: 'default',
      action: `${flow.name}/${stepId}`,
      key: `${workflowId}:${stepId}`,
      fence: hooks.fence(),
      workflowId,
      stepId,
      attempt,
    };
    return hooks.at(window, call);
  };
  const all = <R>({ text, values }: Statement) => db.all<R>(text, values);
  const write = ({ text, values }: Statement) => db.run(text, values);
  const read = async (stepId: string) => (await all<StepRow>(q.readStep(workflowId, stepId)))[0];
  // Every step stored so far, read once: a replay answers from memory, a first run reads nothing more.
  const stored = new Map((await all<StepRow>(q.readSteps(workflowId))).map((row) => [row.step_id, row] as const));

  /** What one step did in this execution: answered from its memo (stored earlier), or ran `attempts` times. */
  interface Done<T> {
    value: T;
    memoized: boolean;
    attempts: number;
  }

  // A step or compensation, counted and spanned; the function it runs nests its own spans under the step's.
  const observedStep = async <T>(
    kind: StepKind,
    stepId: string,
    fn: (ctx: StepContext) => Promise<T> | T,
    options: StepOptions = {},
  ): Promise<Done<T>> => {
    const index = stepIndex++;
    // Stored by an earlier execution: answered from its memo, a failure too, and counted as memoized.
    const earlier = isMemo(stored.get(stepId));
    const span = tracer
      ? startSpan(tracer, 'oncely.step', {
          'oncely.flow': flow.name,
          'oncely.workflow_id': workflowId,
          'oncely.step': stepId,
          'oncely.step_index': index,
          'oncely.compensation': kind === 'compensation',
        })
      : undefined;
    try {
      const done = await withSpan(span, () => attemptStep(kind, stepId, fn, options));
      if (kind === 'step') metrics.add('oncely_flow_steps_total', [flow.name, done.memoized ? 'memoized' : 'executed']);
      if (span)
        endSpan(span, {
          'oncely.outcome': done.memoized ? 'memoized' : 'executed',
          'oncely.memoized': done.memoized,
          'oncely.attempt': done.attempts,
        });
      return done;
    } catch (error) {
      const failed = error instanceof StepFailed;
      const outcome = !failed ? 'suspended' : earlier ? 'memoized' : 'failed';
      if (failed && kind === 'step') metrics.add('oncely_flow_steps_total', [flow.name, outcome]);
      if (span) endSpan(span, { 'oncely.outcome': outcome, 'oncely.memoized': earlier }, failed ? error : undefined);
      throw error;
    }
  };

  const attemptStep = async <T>(
    kind: StepKind,
    stepId: string,
    fn: (ctx: StepContext) => Promise<T> | T,
    options: StepOptions,
  ): Promise<Done<T>> => {
    const memo = stored.get(stepId);
    if (memo?.status === 'completed') return answer(memo, options, true);
    if (memo?.status === 'failed') throw new StepFailed(stepId, JSON.parse(memo.error ?? '{}'));
    const { attempts = 3, backoff = '100ms', maxBackoff = '10s', final } = options.retry ?? {};
    // Still `running`: the run that began its last attempt ended before storing an outcome.
    let previous = memo?.status === 'running' ? interrupted(memo) : null;
    for (let tried = 0; ; tried++) {
      if (!holds()) throw new Suspend('lease_lost');
      // The attempt is stored before its effect, so one a crash cut short is counted and shown.
      const [begun] = await durable(() =>
        all<{ attempts: number | string }>(
          q.startStep(workflowId, stepId, previous && JSON.stringify(previous), Date.now()),
        ),
      );
      if (!begun) return settled(stepId, options);
      const attempt = Number(begun.attempts);
      // Tests only (one check per window when off): the step starts under the run's claim, not memoized.
      if (hooks && tried === 0) await at(hooks, 'claimed', stepId, attempt);
      let value: T;
      if (hooks) await at(hooks, 'before-effect', stepId, attempt);
      try {
        value = await fn(stepContext(stepId, attempt));
      } catch (error) {
        if (error instanceof Suspend) throw error;
        if (attempt >= attempts || final?.(error) === true) return fail(stepId, errorOf(error), options);
        if (kind === 'step') {
          metrics.add('oncely_flow_steps_total', [flow.name, 'retried']);
          if (observer.listening)
            observer.decide({
              decision: 'step_retried',
              surface: 'flow',
              action: flow.name,
              key: workflowId,
              attempt,
              error: errorOf(error),
              detail: { workflowId, stepId },
            });
        }
        previous = errorOf(error);
        await sleep(backoffDelay(attempt, toMs(backoff, 'backoff'), toMs(maxBackoff, 'maxBackoff')));
        continue;
      }
      // The step returned (its effect happened); its completion is not stored yet.
      if (hooks) await at(hooks, 'after-effect', stepId, attempt);
      let text: string;
      try {
        text = encodeJson(value ?? null);
        checkResultSize(text, maxResultBytes);
      } catch (error) {
        // Stored as the step's failure, as the engine stores it: a retry of the flow answers it
        // instead of running the effect again (flows.retry keeps it).
        return fail(stepId, errorOf(error), options);
      }
      // First writer wins: a worker that lost its lease and ran the step too reads the winner's result.
      const finished = await durable(() =>
        write(q.finishStep(workflowId, stepId, 'completed', text, null, Date.now())),
      );
      if (finished === 0) return settled(stepId, options);
      const done = answer<T>(remember(stepId, 'completed', text, null), options, false);
      // Stored: a crash from here on answers the step from its memo; the flow has not moved on.
      if (hooks) await at(hooks, 'completed', stepId, attempt);
      return { ...done, attempts: attempt };
    }
  };

  // The step's memo from now on: the same step id later in this run answers from it, as a replay would.
  const remember = (stepId: string, status: 'completed' | 'failed', result: string | null, error: string | null) => {
    const row = { step_id: stepId, status, result, error, attempts: 0, run: null, started_at: Date.now() };
    stored.set(stepId, row);
    return row;
  };

  // A completed step's value, its compensation registered.
  const answer = <T>(row: StepRow, options: StepOptions, memoized: boolean): Done<T> => {
    const value = JSON.parse(row.result ?? 'null') as T;
    if (options.compensate) compensations.push({ stepId: row.step_id, value, compensate: options.compensate });
    return { value, memoized, attempts: 0 };
  };

  // Fails the step for good, unless another run finished it first: then its outcome is the step's.
  const fail = async <T>(stepId: string, failure: StoredError, options: StepOptions): Promise<Done<T>> => {
    const error = JSON.stringify(failure);
    const finished = await durable(() => write(q.finishStep(workflowId, stepId, 'failed', null, error, Date.now())));
    if (finished === 0) return settled(stepId, options);
    remember(stepId, 'failed', null, error);
    throw new StepFailed(stepId, failure);
  };

  // The step was finished by another run (one that lost its lease, still running it): its outcome.
  const settled = async <T>(stepId: string, options: StepOptions): Promise<Done<T>> => {
    const row = await durable(() => read(stepId));
    if (row?.status === 'completed') return answer(remember(stepId, 'completed', row.result, null), options, false);
    if (row?.status === 'failed') {
      remember(stepId, 'failed', null, row.error);
      throw new StepFailed(stepId, JSON.parse(row.error ?? '{}'));
    }
    throw new Suspend('lease_lost');
  };

  const runStep = async <T>(
    stepId: string,
    fn: (ctx: StepContext) => Promise<T> | T,
    options?: StepOptions,
  ): Promise<T> => (await observedStep('step', stepId, fn, options)).value;

  const waitFor = async <T>(name: string, options: { timeout?: Duration } = {}): Promise<T | null> => {
    const occurrence = (waits.get(name) ?? 0) + 1;
    waits.set(name, occurrence);
    const stepId = `wait:${name}:${occurrence}`;
    const now = Date.now();
    let memo = await durable(() => read(stepId));
    if (memo?.status === 'completed') return JSON.parse(memo.result ?? 'null') as T | null;
    if (!memo) {
      // The wait's start is stored, so its deadline is the same on every replay.
      await durable(() => write(q.insertWait(workflowId, stepId, now)));
      memo = await durable(() => read(stepId));
    }
    const [signal] = await durable(() => all<{ payload: string }>(q.nthSignal(workflowId, name, occurrence - 1)));
    const deadline =
      options.timeout === undefined ? null : Number(memo?.started_at ?? now) + toMs(options.timeout, 'timeout');
    if (!signal && (deadline === null || deadline > now)) throw new Suspend('waiting', deadline);
    const value = signal ? (JSON.parse(signal.payload) as T) : null;
    await durable(() => write(q.completeWait(workflowId, stepId, JSON.stringify(value), now)));
    return JSON.parse((await durable(() => read(stepId)))?.result ?? 'null') as T | null;
  };

  const run: FlowRun = {
    workflowId,
    traceId,
    step: runStep,
    // Every branch settles before the join decides: a step that completes beside a failed one is
    // known to its compensations, and a flow waiting in several branches wakes at the earliest deadline.
    all: async (steps) => {
      const settled = await Promise.allSettled(steps.map((s) => s()));
      const errors = settled.flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []));
      if (errors.length === 0) return settled.map((r) => (r as PromiseFulfilledResult<unknown>).value) as never;
      // A run that lost its lease decides nothing; the new owner replays the same branches.
      const lost = errors.find((e) => e instanceof Suspend && e.reason === 'lease_lost');
      if (lost) throw lost;
      const failure = errors.find((e) => !(e instanceof Suspend));
      if (failure !== undefined) throw failure;
      const suspends = errors as Suspend[];
      const deadlines = suspends.map((e) => e.wakeAt).filter((at): at is number => at !== null);
      throw new Suspend('waiting', deadlines.length > 0 ? Math.min(...deadlines) : null);
    },
    waitFor,
    subKey: (i) => `${workflowId}:${i}`,
  };

  try {
    const result = encodeJson((await flow.fn(run, input as never)) ?? null);
    // The flow's result is stored as a step's is: within maxResultBytes, or the flow fails.
    checkResultSize(result, maxResultBytes);
    return { status: 'completed', result: JSON.parse(result) };
  } catch (error) {
    if (error instanceof Suspend) return { status: 'suspended', reason: error.reason, wakeAt: error.wakeAt };
    // Only the holder may undo a flow: a worker that lost its lease leaves that to the new holder.
    if (!holds()) return { status: 'suspended', reason: 'lease_lost', wakeAt: null };
    // A final failure: undo what was done, newest first, each compensation once.
    for (const done of compensations.reverse()) {
      const stepId = `compensate:${done.stepId}`;
      // Settled by an earlier execution (its memo): counted by the run that did it.
      const earlier = isMemo(stored.get(stepId));
      try {
        await observedStep('compensation', stepId, (ctx) => done.compensate(done.value, ctx));
        if (!earlier) metrics.add('oncely_compensations_total', ['flow', flow.name, 'succeeded']);
      } catch (failure) {
        // A run that lost its lease undoes nothing more: the new holder goes on from the stored compensations.
        if (failure instanceof Suspend) return { status: 'suspended', reason: failure.reason, wakeAt: null };
        if (earlier) continue;
        metrics.add('oncely_compensations_total', ['flow', flow.name, 'failed']);
        if (observer.listening)
          observer.decide({
            decision: 'compensation_failed',
            surface: 'flow',
            action: flow.name,
            key: workflowId,
            error: errorOf((failure as StepFailed).failure ?? failure),
            detail: { workflowId, stepId },
          });
      }
    }
    const cause = error instanceof StepFailed ? error.failure : errorOf(error);
    return { status: 'failed', error: error instanceof StepFailed ? { ...cause, message: error.message } : cause };
  }
}
