import { backoffDelay, sleep } from '../core/backoff.js';
import { type Duration, toMs } from '../core/duration.js';
import { OncelyError } from '../core/errors.js';
import type { Observer } from '../core/observer.js';
import { endSpan, startSpan, withSpan } from '../core/tracing.js';
import type { Db } from '../db/types.js';
import type { CrashWindow, HookCall, TestHooks } from '../engine/hooks.js';
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
  status: 'completed' | 'failed' | 'waiting';
  result: string | null;
  error: string | null;
  started_at: number | string;
}

/** What the worker learns from one execution. */
export type ExecutionOutcome =
  | { status: 'completed'; result: unknown }
  | { status: 'failed'; error: { name: string; message: string; code: string } }
  | { status: 'suspended'; reason: 'waiting' | 'lease_lost'; wakeAt: number | null };

function errorOf(error: unknown): { name: string; message: string; code: string } {
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
  const stored = new Map(
    (await all<StepRow & { step_id: string }>(q.readSteps(workflowId))).map((row) => [row.step_id, row] as const),
  );

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
    const earlier = stored.has(stepId);
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
    if (memo?.status === 'completed') {
      const value = JSON.parse(memo.result ?? 'null') as T;
      if (options.compensate) compensations.push({ stepId, value, compensate: options.compensate });
      return { value, memoized: true, attempts: 0 };
    }
    if (memo?.status === 'failed') throw new StepFailed(stepId, JSON.parse(memo.error ?? '{}'));
    const { attempts = 3, backoff = '100ms', maxBackoff = '10s', final } = options.retry ?? {};
    const startedAt = Date.now();
    // Tests only (one check per window when off): the step starts under the run's claim, not memoized.
    if (hooks) await at(hooks, 'claimed', stepId, 1);
    for (let attempt = 1; ; attempt++) {
      if (!holds()) throw new Suspend('lease_lost');
      let value: T;
      if (hooks) await at(hooks, 'before-effect', stepId, attempt);
      try {
        value = await fn(stepContext(stepId, attempt));
      } catch (error) {
        if (error instanceof Suspend) throw error;
        if (attempt >= attempts || final?.(error) === true) {
          const failure = errorOf(error);
          await durable(() =>
            write(
              q.insertStep(workflowId, stepId, 'failed', null, JSON.stringify(failure), attempt, startedAt, Date.now()),
            ),
          );
          stored.set(stepId, {
            step_id: stepId,
            status: 'failed',
            result: null,
            error: JSON.stringify(failure),
            started_at: startedAt,
          });
          throw new StepFailed(stepId, failure);
        }
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
        await sleep(backoffDelay(attempt, toMs(backoff, 'backoff'), toMs(maxBackoff, 'maxBackoff')));
        continue;
      }
      // The step returned (its effect happened); its completion is not stored yet.
      if (hooks) await at(hooks, 'after-effect', stepId, attempt);
      const text = JSON.stringify(value ?? null);
      // First writer wins: a worker that lost its lease and ran the step too reads the winner's result.
      const inserted = await durable(() =>
        write(q.insertStep(workflowId, stepId, 'completed', text, null, attempt, startedAt, Date.now())),
      );
      const result =
        inserted === 1
          ? (JSON.parse(text) as T)
          : (JSON.parse((await durable(() => read(stepId)))?.result ?? 'null') as T);
      // The same step id later in this run answers from memory, as a replay would.
      stored.set(stepId, {
        step_id: stepId,
        status: 'completed',
        result: JSON.stringify(result ?? null),
        error: null,
        started_at: startedAt,
      });
      if (options.compensate) compensations.push({ stepId, value: result, compensate: options.compensate });
      // Stored: a crash from here on answers the step from its memo; the flow has not moved on.
      if (hooks) await at(hooks, 'completed', stepId, attempt);
      return { value: result, memoized: false, attempts: attempt };
    }
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
    const result = await flow.fn(run, input as never);
    return { status: 'completed', result: JSON.parse(JSON.stringify(result ?? null)) };
  } catch (error) {
    if (error instanceof Suspend) return { status: 'suspended', reason: error.reason, wakeAt: error.wakeAt };
    // Only the holder may undo a flow: a worker that lost its lease leaves that to the new holder.
    if (!holds()) return { status: 'suspended', reason: 'lease_lost', wakeAt: null };
    // A final failure: undo what was done, newest first, each compensation once.
    for (const done of compensations.reverse()) {
      const stepId = `compensate:${done.stepId}`;
      // Settled by an earlier execution (its memo): counted by the run that did it.
      const earlier = stored.has(stepId);
      try {
        await observedStep('compensation', stepId, (ctx) => done.compensate(done.value, ctx));
        if (!earlier) metrics.add('oncely_flow_compensations_total', [flow.name, 'succeeded']);
      } catch (failure) {
        // A run that lost its lease undoes nothing more: the new holder goes on from the stored compensations.
        if (failure instanceof Suspend) return { status: 'suspended', reason: failure.reason, wakeAt: null };
        if (earlier) continue;
        metrics.add('oncely_flow_compensations_total', [flow.name, 'failed']);
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
