import type { PublicRecord } from './record.js';

/**
 * Every code oncely throws or answers, with the HTTP status it is answered with and what it means.
 * The README's error tables are checked against this list (test/core/errors-catalogue.test.ts).
 * `status` is what oncely answers when it answers the code itself (the HTTP middleware, the host's
 * routes). Codes that never reach a client of their own (start-up, CLI, in-process API) carry the
 * status an HTTP layer gives them, 500 unless a 4xx says more; an OncelyError a host handler throws
 * (its own, or one of ctx's) is answered with the `status` it carries, else its code's status here:
 * a 4xx when the caller broke the contract, a 5xx when the server failed.
 */
export const ERRORS = {
  // The engine
  KEY_REQUIRED: { status: 400, meaning: 'no key where one is needed' },
  KEY_INVALID: { status: 400, meaning: 'empty part, over 255 characters, control characters' },
  KEY_REUSED: { status: 422, meaning: 'same key, different input; `error.record` is the existing record' },
  IN_PROGRESS: { status: 409, meaning: 'another caller holds the key; `error.retryAfterMs`' },
  LEASE_LOST: { status: 500, meaning: "this caller's claim was taken over; its outcome was not stored" },
  OUTCOME_UNKNOWN: { status: 409, meaning: "the holder vanished under `'hold'`; resolve it" },
  STORE_UNAVAILABLE: { status: 503, meaning: 'the store failed; nothing ran' },
  OUTCOME_NOT_STORED: {
    status: 500,
    meaning:
      'the function ran, but its outcome could not be stored within `completionRetry`; `error.value` is its result',
  },
  RESULT_TOO_LARGE: {
    status: 409,
    meaning: 'the result exceeded `maxResultBytes` (stored as a failure; over HTTP, 409 `RESPONSE_NOT_STORED`)',
  },
  RESULT_NOT_SERIALIZABLE: { status: 500, meaning: 'the result has a bigint or a cycle (stored as a failure)' },
  INPUT_NOT_SERIALIZABLE: {
    status: 500,
    meaning: 'the input has a bigint, a cycle, a `Map`, a `Set`, a class instance, `Infinity` or `NaN`',
  },
  INVALID_ARGUMENT: { status: 400, meaning: 'a bad option, action, tenant, `tx` or command-line argument' },
  NOT_FOUND: {
    status: 404,
    meaning: '`resolve` on a missing record; a flow that does not exist',
  },
  NOT_RESOLVABLE: {
    status: 409,
    meaning: '`resolve` on a record that is not unknown or stalled, or that changed meanwhile',
  },
  CURSOR_INVALID: { status: 400, meaning: 'a `cursor` that is not one a listing gave' },
  CLOSED: { status: 500, meaning: 'the instance or store was closed' },
  ACTION_FAILED: { status: 500, meaning: 'a stored failure whose error had no code of its own, replayed' },
  // HTTP middleware
  RESPONSE_NOT_STORED: {
    status: 409,
    meaning: 'the key was executed, but its response was streamed or too large to keep; it will not run again',
  },
  REQUEST_TOO_LARGE: { status: 413, meaning: 'the request body is over `maxBodyBytes` (never stored)' },
  BODY_INVALID: { status: 400, meaning: 'the request body is not JSON, or not the JSON object a webhook must be' },
  TRACE_ID_INVALID: {
    status: 400,
    meaning:
      'a `traceId` or `requestId` given to `run`, or an `Oncely-Trace-Id` or `X-Request-Id` header sent twice, that is empty, over 128 characters, or not printable ASCII',
  },
  // The host
  HANDLER_UNKNOWN: { status: 404, meaning: 'no handler of that name' },
  TENANT_INVALID: {
    status: 400,
    meaning: 'the tenant is empty, over 128 characters, or has control or invisible characters',
  },
  INPUT_INVALID: { status: 400, meaning: "the input fails the handler's or tool's declared schema" },
  HANDLER_TIMEOUT: {
    status: 503,
    meaning: 'the handler or consumer ran past its timeout; its transaction rolled back',
  },
  HANDLER_FAILED: { status: 500, meaning: 'the handler threw an error not meant for the client; the log has it' },
  NOT_MIGRATED: { status: 500, meaning: 'the host was used before its tables and schema were migrated' },
  CONFIG_INVALID: { status: 500, meaning: 'the app folder, config, a module or a webhook source cannot be used' },
  SCHEMA_INVALID: {
    status: 500,
    meaning: "the app's `schema.sql` failed, or declares a column that cannot hold times",
  },
  LISTEN_FAILED: { status: 500, meaning: 'the host cannot listen on its port (in use, or not allowed)' },
  DRAIN_TIMEOUT: { status: 500, meaning: 'events were still pending or processing when the drain timed out' },
  FLOWS_UNAVAILABLE: { status: 500, meaning: 'the app has no `flows/` folder' },
  // Configuration, refused at start (issue 30 item 14)
  CONFIG_KEY_UNKNOWN: {
    status: 500,
    meaning:
      "a key of `oncely.config.ts` or of a handler's or consumer's exports that oncely does not read; the message names the nearest known one",
  },
  DB_UNSUPPORTED: {
    status: 500,
    meaning: 'a `--db` or `db` the host cannot run on: it runs on a SQLite file path or a postgres:// URL',
  },
  URL_INVALID: {
    status: 500,
    meaning: 'a database or store URL that does not parse or names no host, refused when the store is created',
  },
  PACKAGE_MISSING: {
    status: 500,
    meaning: 'an optional package the feature needs is not installed; the message says what to `npm install`',
  },
  // Webhooks
  SOURCE_UNKNOWN: { status: 404, meaning: 'no webhook source of that name' },
  SIGNATURE_INVALID: { status: 401, meaning: 'the signature is missing or matches no configured secret' },
  TIMESTAMP_OUT_OF_TOLERANCE: {
    status: 401,
    meaning: 'the signed timestamp is further from now than `toleranceSeconds`',
  },
  EVENT_ID_MISSING: { status: 400, meaning: 'the event carries no id' },
  EVENT_ID_INVALID: { status: 400, meaning: 'the event id is not a usable key' },
  EVENT_TYPE_MISSING: { status: 400, meaning: 'the event carries no type' },
  EVENT_TYPE_INVALID: { status: 400, meaning: 'the event type is over 128 characters or not printable text' },
  // The data store (`ctx.store` answers these as `{ ok: false, error }`)
  TABLE_UNKNOWN: { status: 500, meaning: 'no table of that name in the app schema' },
  COLUMN_UNKNOWN: { status: 500, meaning: 'the table has no column of that name' },
  VALUE_INVALID: { status: 400, meaning: 'a value the column cannot hold (type, range, an object in a scalar column)' },
  WHERE_INVALID: { status: 500, meaning: 'a condition that is not a value or an `op` the column takes' },
  WHERE_REQUIRED: { status: 500, meaning: '`update` without a condition' },
  LIST_TOO_LONG: { status: 400, meaning: '`op.in` with over 1,000 values' },
  FIELD_RESERVED: {
    status: 500,
    meaning: 'a write to a column the host keeps (`createdAt`, `updatedAt`, the version) or the database generates',
  },
  UNIQUE_REQUIRED: { status: 500, meaning: '`uniqueBy` or the key fields are not the primary key or a unique index' },
  VERSION_COLUMN_REQUIRED: { status: 500, meaning: '`applyVersion` on a table without a `version` column' },
  CONSTRAINT_VIOLATION: {
    status: 409,
    meaning: 'the database refused the write (a unique, foreign key or check constraint)',
  },
  // Flows
  FLOW_INPUT_MISMATCH: { status: 422, meaning: 'a flow id started again with another input' },
  FLOW_FAILED: { status: 500, meaning: 'a flow whose result was awaited failed' },
  STEP_FAILED: { status: 500, meaning: 'a step failed for good (its retries exhausted, or `final`)' },
  STEP_ERROR: { status: 500, meaning: "a step's error that had no code of its own, as stored" },
  TIMEOUT: { status: 504, meaning: 'a flow did not finish within the time its result was awaited' },
  FLOW_CANCELLED: { status: 409, meaning: 'a flow whose result was awaited was cancelled' },
  FLOW_NOT_RETRYABLE: { status: 409, meaning: 'a retry of a flow that has not failed' },
  FLOW_NOT_CANCELLABLE: {
    status: 409,
    meaning: 'a cancel of a flow that is not pending or waiting (running or finished)',
  },
  // Agent tools
  TOOL_UNKNOWN: { status: 404, meaning: 'no tool of that name' },
  TOOL_FAILED: { status: 500, meaning: 'the tool threw an error that had no code of its own' },
  BUDGET_EXCEEDED: { status: 402, meaning: 'the account has fewer credits left than the call reserves' },
  RESERVATION_EXPIRED: {
    status: 402,
    meaning:
      'a tool ran past its credit reservation, the sweep gave the credits back and they were spent meanwhile: its effect is not charged',
  },
  ACTION_CHARGED: {
    status: 409,
    meaning: 'the action was done and charged already (its record expired): an action is charged once, ever',
  },
  APPROVAL_UNKNOWN: { status: 404, meaning: 'no approval of that id' },
  APPROVAL_CONTENT_CHANGED: {
    status: 409,
    meaning: 'the intent awaits approval of other content; only the approved content can be sent',
  },
  APPROVAL_EXPIRED: { status: 410, meaning: 'the approval expired before it was decided' },
  APPROVAL_DECIDED: { status: 409, meaning: 'an approve or reject of an approval decided already' },
  APPROVER_REQUIRED: { status: 500, meaning: 'approved in the AI SDK, but no approver is configured to record who' },
  REJECTED: { status: 403, meaning: 'the approval was rejected; do not send' },
  // Operations: the admin API
  ADMIN_UNAUTHORIZED: {
    status: 401,
    meaning: 'an admin request without the bearer token of `ONCELY_ADMIN_TOKEN`, or with another one',
  },
  ADMIN_FORBIDDEN: {
    status: 403,
    meaning: 'an admin request from off this machine while no `ONCELY_ADMIN_TOKEN` is set',
  },
  ADMIN_CROSS_SITE: {
    status: 403,
    meaning:
      'an admin change sent by a page of another site: its `Origin` is not this host, or its `Sec-Fetch-Site` is `cross-site` or `same-site` (refused unread)',
  },
  ADMIN_JSON_REQUIRED: {
    status: 415,
    meaning: 'an admin change whose body is not sent as `Content-Type: application/json` (`{}` where it has no fields)',
  },
  NOT_REPLAYABLE: { status: 409, meaning: 'a replay of an event that is not dead-lettered' },
  // The client (oncely/client)
  RETRIES_EXHAUSTED: {
    status: 503,
    meaning:
      "the client's attempts of one key ran out of time or attempts without an answer; `error.cause` is the last failure",
  },
  // The test kit (oncely/testing)
  UPSTREAM_UNREACHABLE: {
    status: 502,
    meaning: "`faultProxy` could not reach its target (the body says the socket's error)",
  },
} as const satisfies Record<string, { status: number; meaning: string }>;

/** Stable machine-readable codes carried by every error oncely throws: the keys of {@link ERRORS}. */
export type ErrorCode = keyof typeof ERRORS;

/**
 * A code as it arrives from outside the catalogue: a stored failure replayed with its original
 * code, or a code a tool's or handler's error carried. Still completes (and switches) on ErrorCode.
 */
export type AnyErrorCode = ErrorCode | (string & {});

/** True when `code` is one of the catalogue's (own keys only: `toString` is not a code). */
export function isErrorCode(code: unknown): code is ErrorCode {
  return typeof code === 'string' && Object.hasOwn(ERRORS, code);
}

/** The HTTP status of a catalogue code; 500 for any other (a replayed user code). */
export function statusOf(code: AnyErrorCode): number {
  return isErrorCode(code) ? ERRORS[code].status : 500;
}

/** Catalogue statuses that say the request itself is wrong: sent again unchanged, it fails the same way. */
const CONTRACT_STATUSES: ReadonlySet<number> = new Set([400, 413, 422]);

/**
 * True for an oncely error whose code says the request or event breaks the contract (a 400, 413 or
 * 422 of the catalogue: no key, a value the column cannot hold, a key or seed reused with another
 * input), so a retry of it cannot succeed; a consumer's event failing so is dead-lettered at once.
 * A 409 (`IN_PROGRESS`, `CONSTRAINT_VIOLATION`) or a 5xx is not: the state it met may change.
 */
export function isContractError(error: unknown): boolean {
  return OncelyError.is(error) && isErrorCode(error.code) && CONTRACT_STATUSES.has(ERRORS[error.code].status);
}

/**
 * The brand on every oncely error. `Symbol.for` is one symbol per process, so an error made by a
 * second installed copy of oncely (another version deeper in node_modules) carries the same brand,
 * where `instanceof` would only know its own copy's class.
 */
const BRAND = Symbol.for('oncely.error');

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
 * try { await once.run(req, fn) } catch (e) { if (OncelyError.is(e) && e.code === 'IN_PROGRESS') retryLater(e.retryAfterMs) }
 */
export class OncelyError extends Error {
  /**
   * True when `error` is an oncely error (of any class here), made by this copy of oncely or by
   * another one installed in the same process; `instanceof` knows only this copy's. Called on a
   * subclass it still answers for any oncely error: match on `code`.
   */
  static is(error: unknown): error is OncelyError {
    return typeof error === 'object' && error !== null && (error as { [BRAND]?: unknown })[BRAND] === true;
  }

  /**
   * Stable code: switch on this, never on the message. One of the catalogue's, except on a
   * {@link ReplayedError}, which carries the original error's code.
   */
  readonly code: AnyErrorCode;
  /** The existing record, when the error is about one (KEY_REUSED, OUTCOME_UNKNOWN, replays). */
  readonly record: PublicRecord | undefined;
  /** True when this error is a stored failure replayed to a duplicate. */
  readonly replayed: boolean;
  /** For IN_PROGRESS: how long to wait before trying again, in ms. */
  readonly retryAfterMs: number | undefined;

  constructor(code: ErrorCode, message: string, options: OncelyErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'OncelyError';
    this.code = code;
    this.record = options.record;
    this.replayed = options.replayed ?? false;
    this.retryAfterMs = options.retryAfterMs;
    // Not enumerable: logs and inspected errors show no brand.
    Object.defineProperty(this, BRAND, { value: true });
  }
}

/**
 * A stored failure replayed to a duplicate (`replayed: true`): the original error's name, message
 * and code, which is the user's own code as often as one of the catalogue's.
 * @example if (e instanceof ReplayedError && e.code === 'CARD_DECLINED') showDeclined()
 */
export class ReplayedError extends OncelyError {
  override readonly code: AnyErrorCode;

  constructor(stored: { name: string; message: string; code: string }, record: PublicRecord) {
    // ACTION_FAILED only until the stored code replaces it: the base constructor takes catalogue codes.
    super('ACTION_FAILED', stored.message, { record, replayed: true });
    this.code = stored.code;
    this.name = stored.name;
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
