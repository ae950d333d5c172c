import { OncelyError } from '../core/errors.js';
import { type Context, withContext } from '../core/tracing.js';
import type { RunContext } from '../engine/context.js';
import type { RunResult } from '../engine/engine.js';
import { encodeResponse, type HttpResponse, type StoredResponse, withExpiry } from './response.js';

/** A claimed request: report its response (or its abandonment) so the record is written. */
export interface Execution {
  /** The engine's context of the claim: key, stable ids, trace and request ids. */
  readonly context: RunContext;
  /**
   * Stores (or releases) the captured response and returns the response to send. `complete` is
   * false when the body was streamed or cut at maxBodyBytes, which is never stored half. `tx`
   * (a claim-first run, the gate's `claimIn`): the open transaction the outcome is written in, with
   * the handler's writes; if the engine could not write it there (the claim was taken over, the
   * store failed), finish throws that error, so the caller rolls the handler's writes back too.
   */
  finish(response: HttpResponse, complete: boolean, tx?: unknown): Promise<HttpResponse>;
  /** The handler threw, or will never answer: release the key for a retry. */
  abandon(reason: unknown): Promise<void>;
  /**
   * The client disconnected before the handler answered. The handler usually still answers, and
   * that answer is stored, so the client's retry gets what it missed instead of a second
   * execution; a handler that has not answered within one lease is abandoned.
   */
  clientLeft(): void;
  /**
   * Runs the handler (`next()`) in the trace context of the engine's execute span, so spans the
   * handler starts are its children; as is when nothing is traced.
   */
  within<T>(handler: () => T): T;
}

/** What a gate keeps of a handler's response, fixed when the gate is made. */
export interface KeepPolicy {
  /** Which statuses are stored and replayed; the others release the key. */
  stores: (status: number) => boolean;
  /** Response headers stored beside status and body. */
  keep: readonly string[];
  /** How long a handler whose client left may still answer. */
  graceMs: number;
  /** Largest response body stored; a bigger one is answered RESPONSE_NOT_STORED to duplicates. */
  maxBodyBytes: number;
}

/** Marks a captured response the policy does not keep: the engine then releases the key. */
export class NotKept extends Error {}

/**
 * The engine's run of one claimed request, waiting for its handler's response. A class rather
 * than closures: one is made per executed request.
 */
export class Claimed implements Execution {
  /** What the engine stores: settled by finish, abandon or the client-left timer, whichever comes first. */
  readonly outcome: Promise<StoredResponse>;
  private resolve!: (stored: StoredResponse) => void;
  private reject!: (reason: unknown) => void;
  private reported = false;
  private timer: NodeJS.Timeout | undefined;
  /** What finish rejected the outcome with (a response not kept), and what the engine's run failed with. */
  private given: unknown;
  private failure: unknown;

  /** `run` is the engine's run, settled: its result, or undefined when it failed; `trace` the execute span's context. */
  constructor(
    readonly context: RunContext,
    private readonly run: Promise<RunResult<StoredResponse> | undefined>,
    private readonly policy: KeepPolicy,
    private readonly trace: Context | undefined,
  ) {
    this.outcome = new Promise<StoredResponse>((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
  }

  async finish(response: HttpResponse, complete: boolean, tx?: unknown): Promise<HttpResponse> {
    if (!this.report()) return response;
    if (tx !== undefined) this.context.completeIn(tx);
    // Adapters cut a body at maxBodyBytes while capturing; the host hands whole bodies, checked here.
    if (!complete || response.body.byteLength > this.policy.maxBodyBytes)
      this.refuse(new OncelyError('RESPONSE_NOT_STORED', 'response streamed or over maxBodyBytes'));
    else if (!this.policy.stores(response.status)) this.refuse(new NotKept());
    else this.resolve(encodeResponse(response, this.policy.keep));
    const done = await this.run;
    // Claim first: the handler's writes in tx must not commit without the outcome the engine refused.
    if (tx !== undefined && done === undefined && this.failure !== this.given) throw this.failure;
    // The handler's own headers win: an app that sets X-Request-Id itself keeps its value.
    const { headers } = response;
    headers['oncely-trace-id'] ??= this.context.traceId;
    headers['x-request-id'] ??= this.context.requestId;
    // Whatever happened to the record (released, lease lost, store down), this client gets its handler's response.
    return done === undefined ? response : withExpiry(response, done.record);
  }

  /** The engine's run of this claim failed with `error` (before `run` settles): finish reads it. */
  ranInto(error: unknown): void {
    this.failure = error;
  }

  private refuse(reason: unknown): void {
    this.given = reason;
    this.reject(reason);
  }

  within<T>(handler: () => T): T {
    return withContext(this.trace, handler);
  }

  async abandon(reason: unknown): Promise<void> {
    if (this.report()) this.reject(reason instanceof Error ? reason : new NotKept());
    await this.run;
  }

  clientLeft(): void {
    if (this.reported || this.timer) return;
    this.timer = setTimeout(() => {
      if (this.report()) this.reject(new Error('the client left and the handler never answered'));
    }, this.policy.graceMs);
    this.timer.unref();
  }

  /** True the first time only: an outcome is reported once, whichever of finish, abandon or the timer comes first. */
  private report(): boolean {
    if (this.reported) return false;
    this.reported = true;
    clearTimeout(this.timer);
    return true;
  }
}
