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
  try {
    return JSON.stringify({ v: value } satisfies Outcome);
  } catch (cause) {
    throw new OncelyError(
      'RESULT_NOT_SERIALIZABLE',
      `result cannot be stored as JSON: ${cause instanceof Error ? cause.message : String(cause)}`,
      { cause },
    );
  }
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
