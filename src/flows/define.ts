import type { Duration } from '../core/duration.js';
import { InvalidArgumentError } from '../core/errors.js';

/** What a step's function gets: its key, stable across every retry and recovery. */
export interface StepContext {
  /** `<workflowId>:<stepId>`: pass it to every downstream with side effects. */
  readonly idempotencyKey: string;
  readonly workflowId: string;
  readonly stepId: string;
  /** 1 on the first try of this step, more on retries. */
  readonly attempt: number;
  /** The flow's trace id: the intent's that started it (see `FlowRun.traceId`). */
  readonly traceId: string;
  /** `<idempotencyKey>:<i>`, for the i-th effect of one step. */
  subKey(index: number | string): string;
}

/** How a step retries before it fails the flow. */
export interface RetryPolicy {
  /** Tries in all, the first included. Default 3. */
  attempts?: number;
  /** First backoff; doubled each retry, with full jitter. Default '100ms'. */
  backoff?: Duration;
  /** Longest backoff. Default '10s'. */
  maxBackoff?: Duration;
  /** Errors that must not be retried (a declined card): true means final. */
  final?: (error: unknown) => boolean;
}

/** Options of one step. */
export interface StepOptions {
  retry?: RetryPolicy;
  /** Undoes the step if the flow fails for good later; runs once, in reverse order of completion. */
  compensate?: (value: unknown, ctx: StepContext) => Promise<unknown> | unknown;
}

/** What the flow function uses to do anything that must survive a crash. */
export interface FlowRun {
  readonly workflowId: string;
  /**
   * The intent's trace id: the one of the host handler or consumer that started the flow, else
   * `flows.start`'s `traceId` option, else one made at the start (its workflow id for a flow
   * started before trace ids were kept). Pass it downstream beside the step's key.
   */
  readonly traceId: string;
  /** Runs `fn` once for this flow; a replay after a crash returns the stored result without running it. */
  step<T>(id: string, fn: (ctx: StepContext) => Promise<T> | T, options?: StepOptions): Promise<T>;
  /** Runs steps in parallel and joins them. */
  all<T extends readonly unknown[]>(steps: { [K in keyof T]: () => Promise<T[K]> }): Promise<T>;
  /** Waits for `flows.signal(workflowId, name, ...)`; null when `timeout` passes first. */
  waitFor<T = unknown>(name: string, options?: { timeout?: Duration }): Promise<T | null>;
  /** `<workflowId>:<i>`: a key for the i-th effect of the flow. */
  subKey(index: number | string): string;
}

/** A declared flow. */
export interface FlowDefinition<I = unknown, O = unknown> {
  readonly kind: 'oncely-flow';
  readonly name: string;
  /** Input fields whose values, in this order, make the business id. */
  readonly seed: readonly string[];
  readonly fn: (run: FlowRun, input: I) => Promise<O>;
}

/** A flow of any input and output, for collections of flows. */
// biome-ignore lint/suspicious/noExplicitAny: a worker holds flows of every input type; each reads its own input back from JSON.
export type AnyFlow = FlowDefinition<any, any>;

const NAME = /^[a-z0-9][a-z0-9._-]{0,99}$/i;

/**
 * Declares a durable flow: started once per business id, its steps memoized by id.
 * @example defineFlow('lane-change-postprocess', { seed: ['event_id', 'video_file_id'] }, async (run, input) => run.step('cut', () => cut(input)))
 */
export function defineFlow<I, O>(
  name: string,
  options: { seed: readonly (keyof I & string)[] },
  fn: (run: FlowRun, input: I) => Promise<O>,
): FlowDefinition<I, O> {
  if (!NAME.test(name)) throw new InvalidArgumentError(`flow name ${JSON.stringify(name)} must match ${NAME}`);
  if (!options?.seed?.length)
    throw new InvalidArgumentError(`flow ${name} needs a seed: the input fields that make its business id`);
  return Object.freeze({ kind: 'oncely-flow' as const, name, seed: [...options.seed], fn });
}
