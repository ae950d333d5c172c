import { randomUUID } from 'node:crypto';
import { InvalidArgumentError } from '../core/errors.js';
import { stableUuid } from '../core/ids.js';
import type { StoredRecord } from '../core/record.js';

// Inside a caller's transaction the claim cannot be lost to anyone, so its signal never fires.
const NEVER_ABORTED = new AbortController().signal;

/** What a function run under a claim knows about it. */
export interface RunContext {
  /** The key: pass it downstream (payment gateways, mailers) so they dedupe too. */
  readonly idempotencyKey: string;
  readonly action: string;
  readonly tenant: string;
  /** 1 for the first execution, growing with each takeover or released failure. */
  readonly attempt: number;
  /** The fencing token of this claim; a downstream can refuse writes carrying an older one. */
  readonly fence: number;
  /** One per business intent, the same across retries. */
  readonly traceId: string;
  /** One per physical attempt. */
  readonly requestId: string;
  /** Fires when the lease is lost: stop work that has not yet had an effect. */
  readonly signal: AbortSignal;
  /** A deterministic UUID-formatted id for `scope` under this key: the same on every retry. Call it as a method. */
  stableId(scope: string): string;
  /** A key for the i-th sub-effect of this intent (`<key>:<i>`), stable across retries. Call it as a method. */
  subKey(index: number | string): string;
  /**
   * Under `claimIn` (claim first): the open transaction the outcome is written in, so it commits
   * with the function's own writes there. Call it before the function returns; without it the
   * outcome gets a transaction of `claimIn`'s own. Refused (INVALID_ARGUMENT) for any other run.
   */
  completeIn(tx: unknown): void;
}

/**
 * The context of one execution of a claimed record. A class, not an object literal with arrow
 * functions: one is made per execution, and closures per call cost more than the rest of it.
 * `requestId` is made on first read and the abort signal only if asked for.
 */
export class ExecutionContext implements RunContext {
  readonly idempotencyKey: string;
  readonly action: string;
  readonly tenant: string;
  readonly attempt: number;
  readonly fence: number;
  readonly traceId: string;
  #requestId: string | undefined;
  readonly #lease: { readonly signal: AbortSignal } | undefined;
  readonly #claimFirst: boolean;
  /** The transaction named by `completeIn`, where the outcome is written; undefined until then. */
  completion: unknown;

  /**
   * `lease` keeps the claim alive; without one (inside a caller's transaction) the signal never
   * fires. `claimFirst`: the claim was committed on its own (`claimIn`), so `completeIn` applies.
   */
  constructor(
    record: StoredRecord,
    lease: { readonly signal: AbortSignal } | undefined,
    requestId?: string,
    claimFirst = false,
  ) {
    this.idempotencyKey = record.key;
    this.action = record.action;
    this.tenant = record.tenant;
    this.attempt = record.attempts;
    this.fence = record.fence;
    this.traceId = record.traceId;
    this.#lease = lease;
    this.#requestId = requestId;
    this.#claimFirst = claimFirst;
  }

  get requestId(): string {
    this.#requestId ??= randomUUID();
    return this.#requestId;
  }

  get signal(): AbortSignal {
    return this.#lease?.signal ?? NEVER_ABORTED;
  }

  stableId(scope: string): string {
    return stableUuid(this.tenant, this.action, this.idempotencyKey, scope);
  }

  subKey(index: number | string): string {
    return `${this.idempotencyKey}:${index}`;
  }

  completeIn(tx: unknown): void {
    if (!this.#claimFirst)
      throw new InvalidArgumentError('completeIn applies to a run with claimIn; this run joins its own tx, if any');
    if (tx === undefined || tx === null) throw new InvalidArgumentError('completeIn needs an open transaction');
    this.completion = tx;
  }
}
