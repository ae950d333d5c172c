import { backoffDelay } from '../core/backoff.js';
import type { Duration } from '../core/duration.js';
import { durationOption } from '../core/duration-option.js';
import { InvalidArgumentError, KeyInvalidError, KeyRequiredError, OncelyError } from '../core/errors.js';
import { type KeyPart, keyFrom, validateKey } from '../core/key.js';

/** How one intent is retried; a duration is a Duration: '30s', or milliseconds. Every field has a default. */
export interface RetryOptions {
  /** Every attempt and wait of one intent within this; then RETRIES_EXHAUSTED or the last answer. Default '30s'. */
  deadline?: Duration;
  /** One attempt's timeout (the deadline's rest when shorter). Default '10s'. */
  attemptTimeout?: Duration;
  /** Most attempts. Default 8. */
  maxAttempts?: number;
  /** Backoff: attempt n waits a uniform draw in [0, min(maxBackoff, backoff * 2^(n-1))). Default '200ms'. */
  backoff?: Duration;
  /** The longest backoff wait. Default '5s'. */
  maxBackoff?: Duration;
  /** @deprecated Write `deadline`; goes in 0.2.0. */
  deadlineMs?: number;
  /** @deprecated Write `attemptTimeout`; goes in 0.2.0. */
  attemptTimeoutMs?: number;
  /** @deprecated Write `backoff`; goes in 0.2.0. */
  baseDelayMs?: number;
  /** @deprecated Write `maxBackoff`; goes in 0.2.0. */
  maxDelayMs?: number;
  /** Cancels the intent: the attempt in flight and any wait. */
  signal?: AbortSignal;
  /** The fetch to call. Default: the global one. */
  fetch?: typeof fetch;
}

/** The answer of one intent: the response, and whether the server replayed a stored one. */
export interface IdempotentResponse {
  response: Response;
  /** True when the server answered `Idempotent-Replayed: true`: the work was done by an earlier attempt. */
  replayed: boolean;
  /** Attempts sent, from 1. */
  attempts: number;
  /** The key every attempt carried. */
  key: string;
}

/** A key as given: the key itself, or its business parts for keyFrom. */
export type KeyInput = string | readonly KeyPart[];

/**
 * Sends one intent (one key, made once) and retries it until it is answered: network errors and
 * timeouts, 409 IN_PROGRESS (after its Retry-After), 429 and 5xx (after Retry-After, else
 * exponential backoff with full jitter), within a total deadline. Any other answer, 4xx included,
 * is returned as it is. Every attempt carries the same Idempotency-Key and Oncely-Trace-Id.
 * Redirects are followed only to the same origin, and only 307 and 308 (same method, body and
 * headers); any other redirect, one to another origin above all, is the answer: the body and
 * credential headers never go to a server the caller did not name.
 * @example const { response, replayed } = await idempotentFetch('/orders', { method: 'POST', body }, { key: ['ORD-1', 'create'] })
 */
export function idempotentFetch(
  url: string | URL,
  init: RequestInit = {},
  options: RetryOptions & { key: KeyInput },
): Promise<IdempotentResponse> {
  return fetchIntent(url, init, options, DEFAULT_RETRY);
}

/** The retry settings of an intent in milliseconds, each option given or its default. */
export interface RetrySettings {
  deadlineMs: number;
  attemptTimeoutMs: number;
  maxAttempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
}

const DEFAULT_RETRY: RetrySettings = {
  deadlineMs: 30_000,
  attemptTimeoutMs: 10_000,
  maxAttempts: 8,
  baseDelayMs: 200,
  maxDelayMs: 5_000,
};

/**
 * The settings of `options` over `defaults` (a client's, or oncely's); an old `...Ms` name is read
 * with its deprecation warning. INVALID_ARGUMENT for a duration or count that cannot be used.
 */
export function retrySettings(options: RetryOptions, defaults: RetrySettings = DEFAULT_RETRY): RetrySettings {
  const where = 'idempotentFetch';
  const { maxAttempts = defaults.maxAttempts } = options;
  if (!Number.isFinite(maxAttempts) || maxAttempts < 0)
    throw new InvalidArgumentError('maxAttempts must be a number from 0');
  return {
    deadlineMs: durationOption(options, 'deadline', 'deadlineMs', defaults.deadlineMs, where),
    attemptTimeoutMs: durationOption(options, 'attemptTimeout', 'attemptTimeoutMs', defaults.attemptTimeoutMs, where),
    maxAttempts,
    baseDelayMs: durationOption(options, 'backoff', 'baseDelayMs', defaults.baseDelayMs, where),
    maxDelayMs: durationOption(options, 'maxBackoff', 'maxDelayMs', defaults.maxDelayMs, where),
  };
}

/** `idempotentFetch` with the settings it falls back to: oncely's defaults, or a client's. */
export async function fetchIntent(
  url: string | URL,
  init: RequestInit,
  options: RetryOptions & { key: KeyInput },
  defaults: RetrySettings,
): Promise<IdempotentResponse> {
  const key = keyOf(options?.key);
  const { deadlineMs, attemptTimeoutMs, maxAttempts, baseDelayMs, maxDelayMs } = retrySettings(options, defaults);
  const { signal, fetch: send = globalThis.fetch } = options;
  if (init.redirect !== undefined && init.redirect !== 'follow' && init.redirect !== 'manual')
    throw new InvalidArgumentError(
      "redirect must be 'follow' (the default: same-origin 307 and 308 only) or 'manual' (none followed)",
    );
  if (typeof ReadableStream !== 'undefined' && init.body instanceof ReadableStream)
    throw new InvalidArgumentError(
      'a retried request needs a body it can send again: a string, bytes or form, not a stream',
    );
  const headers = new Headers(init.headers);
  headers.set('idempotency-key', `"${key.replace(/["\\]/g, '\\$&')}"`);
  // One trace id per intent, the same on every attempt: the server's records and logs join them up.
  if (!headers.has('oncely-trace-id')) headers.set('oncely-trace-id', globalThis.crypto.randomUUID());
  const deadline = Date.now() + deadlineMs;
  // The server's last answer outlives a later attempt that got none (a timeout at the deadline):
  // a 502 tells the caller more than "aborted".
  let answered: Response | undefined;
  let failure: unknown;
  for (let attempt = 1; ; attempt++) {
    signal?.throwIfAborted();
    const left = deadline - Date.now();
    const timeout = AbortSignal.timeout(Math.max(1, Math.min(attemptTimeoutMs, left)));
    let wait: number | undefined | false;
    try {
      const response = await sendFollowing(send, url, init.redirect !== 'manual', {
        ...init,
        headers,
        redirect: 'manual',
        signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
      });
      wait = await retryDelay(response);
      if (wait === false)
        return { response, replayed: response.headers.get('idempotent-replayed') === 'true', attempts: attempt, key };
      answered = response;
    } catch (error) {
      // The caller's own cancel ends the intent; anything else (no connection, a reset, the
      // attempt's timeout) may have reached the server or not: the same key makes the retry safe.
      if (signal?.aborted) throw signal.reason;
      failure = error;
    }
    const delay = typeof wait === 'number' ? wait : backoffDelay(attempt, baseDelayMs, maxDelayMs);
    if (attempt >= maxAttempts || Date.now() + delay >= deadline) return exhausted(answered ?? failure, attempt, key);
    await sleep(delay, signal);
  }
}

/** The most same-origin redirects one attempt follows before the last one is its answer. */
const REDIRECTS_MAX = 5;

/**
 * One attempt: `init` sent to `url` with fetch's own redirects off, then, when `follow`, to the
 * Location of a same-origin 307 or 308 again (up to REDIRECTS_MAX). fetch would follow any redirect,
 * to any origin, with the body and every header but Authorization; a 301, 302 or 303 would turn
 * the POST into a GET without its key's intent. Those are returned instead, for the caller to judge.
 * (A browser answers an opaque redirect, status 0, without its Location: returned as it is too.)
 */
async function sendFollowing(
  send: typeof fetch,
  url: string | URL,
  follow: boolean,
  init: RequestInit,
): Promise<Response> {
  let at = new URL(url, globalThis.location?.href);
  for (let hops = 0; ; hops++) {
    const response = await send(at, init);
    const location = response.headers.get('location');
    if (!follow || hops === REDIRECTS_MAX || (response.status !== 307 && response.status !== 308) || !location)
      return response;
    const next = new URL(location, at);
    if (next.origin !== at.origin) return response;
    await response.body?.cancel().catch(() => undefined);
    at = next;
  }
}

/** After retries ran out: the last answer as it is, or RETRIES_EXHAUSTED with the last failure as cause. */
function exhausted(last: unknown, attempts: number, key: string): IdempotentResponse {
  if (last instanceof Response)
    return { response: last, replayed: last.headers.get('idempotent-replayed') === 'true', attempts, key };
  throw new OncelyError('RETRIES_EXHAUSTED', `key "${key}": no answer after ${attempts} attempts`, { cause: last });
}

/** False when the answer is final; else the wait its Retry-After asks for (undefined: back off). */
async function retryDelay(response: Response): Promise<number | undefined | false> {
  const { status } = response;
  if (status === 409) {
    // Only IN_PROGRESS means "ask again"; KEY_REUSED, OUTCOME_UNKNOWN and RESPONSE_NOT_STORED do not change by waiting.
    if ((await codeOf(response)) !== 'IN_PROGRESS') return false;
  } else if (status !== 429 && status < 500) return false;
  const after = retryAfterMs(response.headers.get('retry-after'));
  // Drained so the connection is free for the next attempt.
  await response.body?.cancel().catch(() => undefined);
  return after;
}

/** The code of a problem document (`code`) or of the host's envelope (`error.code`), read from a copy. */
async function codeOf(response: Response): Promise<string | undefined> {
  try {
    const body = (await response.clone().json()) as { code?: unknown; error?: { code?: unknown } };
    const code = typeof body.code === 'string' ? body.code : body.error?.code;
    return typeof code === 'string' ? code : undefined;
  } catch {
    return undefined;
  }
}

/** Retry-After in ms: delay-seconds or an HTTP date; undefined when absent or unreadable. */
export function retryAfterMs(value: string | null): number | undefined {
  if (value === null || value.trim() === '') return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

function keyOf(given: KeyInput | undefined): string {
  if (given === undefined || given === null)
    throw new KeyRequiredError(
      'idempotentFetch needs { key }: built once per intent from its business facts, e.g. keyFrom(orderId, "create")',
    );
  const key = typeof given === 'string' ? validateKey(given) : keyFrom(...given);
  // The header carries printable ASCII only (an RFC 8941 string).
  if (!/^[\x20-\x7e]+$/.test(key)) throw new KeyInvalidError('a key sent over HTTP must be printable ASCII');
  return key;
}

/** Resolves after `ms`, or rejects with the signal's reason once it aborts. */
function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', abort);
      resolve();
    }, ms);
    const abort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener('abort', abort, { once: true });
  });
}
