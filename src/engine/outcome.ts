import { OncelyError, ReplayedError } from '../core/errors.js';
import type { PublicRecord } from '../core/record.js';

/** What a stored failure keeps of the original error, so replays can rebuild it. */
export interface StoredError {
  name: string;
  message: string;
  code: string;
}

// Results are wrapped ({ v } or { e }) so `undefined` and `null` values both survive a replay.
type Outcome = { v?: unknown } | { e: StoredError };

/**
 * JSON text of a successful value. Values follow JSON.stringify exactly (a Map becomes `{}`, an
 * `undefined` in an array `null`, and the first call returns that same shape); what it cannot
 * write at all (a bigint, a cycle, a throwing toJSON) is RESULT_NOT_SERIALIZABLE.
 */
export function encodeValue(value: unknown): string {
  return encodeJson({ v: value } satisfies Outcome);
}

/** JSON text of `value` (a flow step's result too); what JSON cannot write is RESULT_NOT_SERIALIZABLE. */
export function encodeJson(value: unknown): string {
  try {
    return JSON.stringify(value);
  } catch (cause) {
    throw new OncelyError(
      'RESULT_NOT_SERIALIZABLE',
      `result cannot be stored as JSON: ${cause instanceof Error ? cause.message : String(cause)}`,
      { cause },
    );
  }
}

/**
 * RESULT_TOO_LARGE when `text` (an encoded result) is over `maxBytes` of UTF-8: the effect that made
 * it happened, so the caller stores this as its failure rather than run the effect again.
 */
export function checkResultSize(text: string, maxBytes: number): void {
  // A string of n UTF-16 units is at most 3n bytes: most results are measured without encoding.
  if (text.length * 3 > maxBytes && Buffer.byteLength(text) > maxBytes)
    throw new OncelyError('RESULT_TOO_LARGE', `result is larger than maxResultBytes (${maxBytes})`);
}

/** JSON text of a failure: name, message and code of the error, never its stack. */
export function encodeError(error: unknown): string {
  const e = error as { name?: unknown; message?: unknown; code?: unknown };
  const stored: StoredError = {
    name: typeof e?.name === 'string' ? e.name : 'Error',
    message: typeof e?.message === 'string' ? e.message : String(error),
    code: typeof e?.code === 'string' || typeof e?.code === 'number' ? String(e.code) : 'ACTION_FAILED',
  };
  return JSON.stringify({ e: stored } satisfies Outcome);
}

/** The value stored by encodeValue. */
export function decodeValue<T>(text: string | null): T {
  const outcome = JSON.parse(text ?? '{}') as { v?: T };
  return outcome.v as T;
}

/** The error a replay of a stored failure throws: original name, message and code, `replayed: true`. */
export function decodeError(text: string | null, record: PublicRecord): ReplayedError {
  const outcome = JSON.parse(text ?? '{}') as { e?: StoredError };
  return new ReplayedError(outcome.e ?? { name: 'Error', message: 'stored failure', code: 'ACTION_FAILED' }, record);
}
