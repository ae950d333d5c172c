import { InvalidArgumentError, KeyInvalidError, KeyRequiredError, OncelyError } from './errors.js';

/** Longest key accepted, in characters (code points), as the IETF Idempotency-Key draft suggests. */
export const MAX_KEY_LENGTH = 255;
/** Longest action or tenant name accepted, in characters. */
export const MAX_NAME_LENGTH = 128;

// Control, format, surrogate and unassigned code points: invisible or ambiguous in logs and headers.
const NOT_PRINTABLE = /\p{C}/u;

/** A part of a key: a business fact such as an order id, an operation name or a version. */
export type KeyPart = string | number | bigint;

/**
 * Builds a key from business facts, joined with ':'. A ':' or '\' inside a part is escaped, so
 * `keyFrom('a:b', 'c')` and `keyFrom('a', 'b', 'c')` never collide.
 * @example keyFrom('ORD-10086', 'charge') // 'ORD-10086:charge'
 */
export function keyFrom(...parts: KeyPart[]): string {
  if (parts.length === 0) throw new KeyRequiredError('keyFrom() needs at least one part');
  const key = parts
    .map((part, i) => {
      if (typeof part === 'number' && !Number.isFinite(part))
        throw new KeyInvalidError(`key part ${i} is not a finite number`);
      if (typeof part !== 'string' && typeof part !== 'number' && typeof part !== 'bigint')
        throw new KeyInvalidError(
          `key part ${i} must be a string, number or bigint, got ${part === null ? 'null' : typeof part}`,
        );
      const text = String(part);
      if (text.length === 0) throw new KeyInvalidError(`key part ${i} is empty`);
      return text.replace(/[\\:]/g, (c) => `\\${c}`);
    })
    .join(':');
  return validateKey(key);
}

/** Checks a key: 1 to 255 printable characters. Returns it unchanged, or throws KEY_REQUIRED / KEY_INVALID. */
export function validateKey(key: unknown): string {
  if (key === undefined || key === null || key === '') throw new KeyRequiredError();
  if (typeof key !== 'string') throw new KeyInvalidError(`a key must be a string, got ${typeof key}`);
  // Counting code points builds an array: only needed when the UTF-16 length could be over.
  if (key.length > MAX_KEY_LENGTH) {
    const length = [...key].length;
    if (length > MAX_KEY_LENGTH)
      throw new KeyInvalidError(`a key must be at most ${MAX_KEY_LENGTH} characters, got ${length}`);
  }
  // Most keys are printable ASCII with something besides spaces: settled by one scan, without
  // the Unicode-aware regular expression.
  if (plainAscii(key)) return key;
  if (NOT_PRINTABLE.test(key))
    throw new KeyInvalidError('a key must be printable text, without control or invisible characters');
  if (key.trim().length === 0) throw new KeyInvalidError('a key must not be only whitespace');
  return key;
}

/** True when every character is printable ASCII (space to '~') and one of them is not a space. */
function plainAscii(text: string): boolean {
  let visible = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x20 || c > 0x7e) return false;
    if (c !== 0x20) visible = true;
  }
  return visible;
}

/** Checks an action or tenant name: 1 to 128 printable characters. */
export function validateName(value: unknown, what: 'action' | 'tenant'): string {
  if (typeof value !== 'string' || value.trim().length === 0)
    throw new InvalidArgumentError(`${what} must be a non-empty string`);
  if ((value.length > MAX_NAME_LENGTH && [...value].length > MAX_NAME_LENGTH) || NOT_PRINTABLE.test(value))
    throw new InvalidArgumentError(`${what} must be at most ${MAX_NAME_LENGTH} printable characters`);
  return value;
}

/** Longest trace or request id accepted: ids are logged, stored and echoed, so they are bounded. */
export const MAX_ID_LENGTH = 128;
// Printable ASCII without spaces: safe in a header, a log line and a span attribute as it is.
const ID = /^[\x21-\x7e]+$/;

/**
 * Checks a trace or request id a caller gives (`run({ traceId })`, the Oncely-Trace-Id and
 * X-Request-Id headers): 1 to MAX_ID_LENGTH printable ASCII characters without spaces, else
 * TRACE_ID_INVALID.
 */
export function validateId(id: unknown, name: string): string {
  if (typeof id !== 'string' || id.length > MAX_ID_LENGTH || !ID.test(id))
    throw new OncelyError(
      'TRACE_ID_INVALID',
      `${name} must be 1 to ${MAX_ID_LENGTH} printable ASCII characters without spaces`,
    );
  return id;
}

/**
 * Longest event type accepted, in characters: a type is a metric label, a log field and a
 * consumer's file name (`consumers/<source>/<type>.ts`), so it is a name, not a payload.
 */
export const MAX_EVENT_TYPE_LENGTH = 128;

/**
 * Checks an event type, the one rule of every intake (webhooks, broker inboxes, the event queue):
 * 1 to MAX_EVENT_TYPE_LENGTH printable characters, not only whitespace, else EVENT_TYPE_INVALID.
 * A NUL byte, which PostgreSQL cannot store in text, is not printable.
 */
export function validateEventType(type: unknown): string {
  if (typeof type !== 'string' || type.trim().length === 0)
    throw new OncelyError('EVENT_TYPE_INVALID', 'an event type must be a non-empty string');
  if (type.length > MAX_EVENT_TYPE_LENGTH && [...type].length > MAX_EVENT_TYPE_LENGTH)
    throw new OncelyError('EVENT_TYPE_INVALID', `an event type must be at most ${MAX_EVENT_TYPE_LENGTH} characters`);
  if (!plainAscii(type) && NOT_PRINTABLE.test(type))
    throw new OncelyError(
      'EVENT_TYPE_INVALID',
      'an event type must be printable text, without control or invisible characters',
    );
  return type;
}
