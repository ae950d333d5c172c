import type { PublicRecord } from './record.js';

/** Stable machine-readable codes carried by every error oncely throws. */
export type ErrorCode =
  | 'KEY_INVALID'
  | 'KEY_REQUIRED'
  | 'KEY_REUSED'
  | 'IN_PROGRESS'
  | 'LEASE_LOST'
  | 'OUTCOME_UNKNOWN'
  | 'STORE_UNAVAILABLE'
  | 'INVALID_ARGUMENT'
  | 'INPUT_NOT_SERIALIZABLE'
  | 'RESULT_TOO_LARGE'
  | 'RESULT_NOT_SERIALIZABLE'
  | 'OUTCOME_NOT_STORED'
  | 'TENANT_INVALID'
  | 'VALUE_INVALID'
  | 'LIST_TOO_LONG'
  | 'REQUEST_TOO_LARGE'
  | 'RESPONSE_NOT_STORED'
  | 'HANDLER_TIMEOUT'
  | 'CONFIG_INVALID'
  | 'SCHEMA_INVALID'
  | 'LISTEN_FAILED'
  | 'SOURCE_UNKNOWN'
  | 'SIGNATURE_INVALID'
  | 'TIMESTAMP_OUT_OF_TOLERANCE'
  | 'BODY_INVALID'
  | 'EVENT_ID_MISSING'
  | 'EVENT_ID_INVALID'
  | 'EVENT_TYPE_MISSING'
  | 'NOT_FOUND'
  | 'NOT_RESOLVABLE'
  | 'CLOSED';

/** Options shared by every oncely error. */
export interface OncelyErrorOptions {
  cause?: unknown;
  record?: PublicRecord;
  replayed?: boolean;
  retryAfterMs?: number;
}

/**
 * The one error type of oncely. `code` is stable and meant for programs; `message` is for people.
 * @example
 * try { await once.run(req, fn) } catch (e) { if (e instanceof OncelyError && e.code === 'IN_PROGRESS') retryLater(e.retryAfterMs) }
 */
export class OncelyError extends Error {
  /** Stable code: switch on this, never on the message. */
  readonly code: string;
  /** The existing record, when the error is about one (KEY_REUSED, OUTCOME_UNKNOWN, replays). */
  readonly record: PublicRecord | undefined;
  /** True when this error is a stored failure replayed to a duplicate. */
  readonly replayed: boolean;
  /** For IN_PROGRESS: how long to wait before trying again, in ms. */
  readonly retryAfterMs: number | undefined;

  constructor(code: ErrorCode | string, message: string, options: OncelyErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'OncelyError';
    this.code = code;
    this.record = options.record;
    this.replayed = options.replayed ?? false;
    this.retryAfterMs = options.retryAfterMs;
  }
}

/** A key that is malformed: empty, too long, or with control characters. */
export class KeyInvalidError extends OncelyError {
  constructor(message: string) {
    super('KEY_INVALID', message);
    this.name = 'KeyInvalidError';
  }
}

/** No key where one is required. oncely never invents one. */
export class KeyRequiredError extends OncelyError {
  constructor(message = 'an idempotency key is required and none was given') {
    super('KEY_REQUIRED', message);
    this.name = 'KeyRequiredError';
  }
}

/** The same key was used with another input: a caller bug, never answered with the old result. */
export class KeyReusedError extends OncelyError {
  constructor(record: PublicRecord) {
    super(
      'KEY_REUSED',
      `key "${record.key}" of action "${record.action}" was first used with another input (record is ${record.state})`,
      { record },
    );
    this.name = 'KeyReusedError';
  }
}

/** Another caller holds the key right now. */
export class InProgressError extends OncelyError {
  constructor(record: PublicRecord, retryAfterMs: number) {
    super('IN_PROGRESS', `key "${record.key}" of action "${record.action}" is being executed by another caller`, {
      record,
      retryAfterMs,
    });
    this.name = 'InProgressError';
  }
}

/** This caller's claim was taken over after its lease ran out; its completion was refused. */
export class LeaseLostError extends OncelyError {
  constructor(key: string, action: string) {
    super(
      'LEASE_LOST',
      `lease on key "${key}" of action "${action}" was lost to a newer holder; its outcome was not stored`,
    );
    this.name = 'LeaseLostError';
  }
}

/** A holder vanished mid-execution under the 'hold' policy: a person or reconciler must decide. */
export class OutcomeUnknownError extends OncelyError {
  constructor(record: PublicRecord) {
    super(
      'OUTCOME_UNKNOWN',
      `key "${record.key}" of action "${record.action}" was claimed and its holder vanished; resolve it with once.resolve()`,
      { record },
    );
    this.name = 'OutcomeUnknownError';
  }
}

/** The store could not be reached or failed; the function was not run without a claim. */
export class StoreUnavailableError extends OncelyError {
  constructor(cause: unknown) {
    super(
      'STORE_UNAVAILABLE',
      `idempotency store unavailable: ${cause instanceof Error ? cause.message : String(cause)}`,
      {
        cause,
      },
    );
    this.name = 'StoreUnavailableError';
  }
}

/**
 * The function ran (its effect happened) but its outcome could not be written, even after
 * retrying for `completionRetry`. Unlike STORE_UNAVAILABLE this is not "nothing ran": `value` is
 * what the function returned (or `failure` what it threw, for an outcome to be stored as a
 * failure), and the record stays in progress until its lease runs out, when the action's
 * `onLeaseExpired` decides.
 */
export class OutcomeNotStoredError extends OncelyError {
  /** The function's return value (undefined when the outcome was a failure). */
  readonly value: unknown;
  /** What the function threw, when that failure was the outcome to store. */
  readonly failure: unknown;

  constructor(key: string, action: string, cause: unknown, outcome: { value?: unknown; failure?: unknown }) {
    super(
      'OUTCOME_NOT_STORED',
      `key "${key}" of action "${action}" was executed, but its outcome could not be stored: ${cause instanceof Error ? cause.message : String(cause)}`,
      { cause },
    );
    this.name = 'OutcomeNotStoredError';
    this.value = outcome.value;
    this.failure = outcome.failure;
  }
}

/** An option or argument that cannot be used. */
export class InvalidArgumentError extends OncelyError {
  constructor(message: string) {
    super('INVALID_ARGUMENT', message);
    this.name = 'InvalidArgumentError';
  }
}
