import { KeyInvalidError, KeyRequiredError, OncelyError } from '../core/errors.js';
import { validateId, validateKey } from '../core/key.js';

/** The request header of draft-ietf-httpapi-idempotency-key-header. */
export const HEADER = 'Idempotency-Key';

// RFC 8941 sf-string: printable ASCII between quotes, with only \" and \\ escaped.
const SF_STRING = /^"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"$/;
// For clients that send the key bare (most SDKs do): an RFC 9110 token.
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/**
 * Reads the Idempotency-Key header: a structured-field string (`"abc"`) as the draft says, or a
 * bare token for compatibility. Returns undefined when absent; throws KEY_INVALID when malformed.
 */
export function readKeyHeader(value: string | string[] | undefined | null): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (Array.isArray(value)) {
    if (value.length > 1) throw new KeyInvalidError(`${HEADER} must be sent once`);
    return readKeyHeader(value[0]);
  }
  const text = value.trim();
  if (text === '') throw new KeyRequiredError(`${HEADER} is empty`);
  // Most clients quote a plain key: settled by one scan, without a match array and a replace.
  if (plainQuoted(text)) return readKey(text.slice(1, -1));
  const quoted = SF_STRING.exec(text);
  const key = quoted ? (quoted[1] ?? '').replace(/\\(["\\])/g, '$1') : TOKEN.test(text) ? text : undefined;
  if (key === undefined)
    throw new KeyInvalidError(`${HEADER} must be a quoted string ("...") or a token of printable ASCII without spaces`);
  return readKey(key);
}

/** True for `"..."` holding only printable ASCII without a quote or a backslash: SF_STRING's case without escapes. */
function plainQuoted(text: string): boolean {
  const last = text.length - 1;
  if (last < 1 || text.charCodeAt(0) !== 0x22 || text.charCodeAt(last) !== 0x22) return false;
  for (let i = 1; i < last; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x20 || c > 0x7e || c === 0x22 || c === 0x5c) return false;
  }
  return true;
}

/** The key of the header, checked: an empty one (`""`) is KEY_INVALID, the header being there. */
function readKey(key: string): string {
  try {
    return validateKey(key);
  } catch (error) {
    if (OncelyError.is(error) && error.code === 'KEY_REQUIRED') throw new KeyInvalidError(`${HEADER} is empty`);
    throw error;
  }
}

/** The request header carrying the intent's trace id, the same on every retry of one intent. */
export const TRACE_HEADER = 'Oncely-Trace-Id';
/** The request header carrying this attempt's own id. */
export const REQUEST_ID_HEADER = 'X-Request-Id';

const TRACEPARENT = /^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$/;

/** The trace id of a W3C `traceparent` header (32 hex digits, not all zero), or undefined. */
export function traceparentId(value: string | null | undefined): string | undefined {
  const id = TRACEPARENT.exec(value?.trim().toLowerCase() ?? '')?.[1];
  return id === undefined || /^0+$/.test(id) ? undefined : id;
}

/**
 * The intent's trace id a delivery's headers name (a webhook's, a broker message's): its
 * Oncely-Trace-Id, else its `traceparent`'s. An unusable one is ignored, never a reason to refuse
 * the event the sender is delivering. `get` answers a header by name, as `Headers.get` does.
 */
export function traceIdOf(headers: { get(name: string): string | null | undefined }): string | undefined {
  try {
    const own = readIdHeader(headers.get(TRACE_HEADER) ?? undefined, TRACE_HEADER);
    if (own !== undefined) return own;
  } catch {
    // Malformed: the traceparent, if any, still names the trace.
  }
  return traceparentId(headers.get('traceparent'));
}

/**
 * Reads an id header (Oncely-Trace-Id, X-Request-Id): undefined when absent; TRACE_ID_INVALID when
 * sent twice, or not what `validateId` accepts.
 */
export function readIdHeader(value: string | string[] | undefined, name: string): string | undefined {
  if (value === undefined) return undefined;
  if (Array.isArray(value)) {
    if (value.length !== 1) throw new OncelyError('TRACE_ID_INVALID', `${name} must be sent once`);
    return readIdHeader(value[0], name);
  }
  return validateId(value.trim(), name);
}
