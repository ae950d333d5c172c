/**
 * What the admin API accepts, checked before anything runs: query parameters (known names only,
 * each once), limits, states from the known lists, names, and the JSON bodies of its changes.
 * Everything refused is a typed OncelyError of the catalogue, never a 500; and how it answers.
 */
import { decodeCursor } from '../core/cursor.js';
import type { Duration } from '../core/duration.js';
import { InvalidArgumentError, OncelyError, statusOf } from '../core/errors.js';
import { parseRecordRef, type RecordId } from '../core/record.js';
import type { Resolution } from '../engine/engine.js';
import { statsJson } from '../host/stats.js';

/** Rows per page when a request names no `limit`. */
export const PAGE_DEFAULT = 100;
/** The most rows one page answers. */
export const PAGE_MAX = 1_000;
/** Longest cursor read: ours are far shorter, and a long one is not ours. */
const CURSOR_MAX = 2_000;
/** Longest free text accepted (a note, a reason, an error's message). */
export const TEXT_MAX = 1_000;
/** Longest id accepted in a path (a workflow id, an approval id, an event id). */
const ID_MAX = 300;
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is refused.
const CONTROL = /[\u0000-\u001f\u007f]/;
// Free text may run over lines; no other control character is text.
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is refused.
const CONTROL_IN_TEXT = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/;

/** A request's query, read by name once each; names it did not declare are INVALID_ARGUMENT. */
export function readQuery(url: string, names: readonly string[]): Map<string, string> {
  const query = new Map<string, string>();
  for (const [name, value] of new URL(url).searchParams) {
    if (!names.includes(name))
      throw new InvalidArgumentError(
        `unknown query parameter ${JSON.stringify(name)}${names.length > 0 ? ` (known: ${names.join(', ')})` : ''}`,
      );
    if (query.has(name)) throw new InvalidArgumentError(`query parameter ${name} is given twice`);
    query.set(name, value);
  }
  return query;
}

/** `limit`: a whole number from 1 to PAGE_MAX, default PAGE_DEFAULT. */
export function limitOf(query: Map<string, string>): number {
  const text = query.get('limit');
  if (text === undefined) return PAGE_DEFAULT;
  const limit = /^\d{1,7}$/.test(text) ? Number(text) : Number.NaN;
  if (!(limit >= 1 && limit <= PAGE_MAX))
    throw new InvalidArgumentError(`limit must be a whole number from 1 to ${PAGE_MAX}, got ${JSON.stringify(text)}`);
  return limit;
}

/**
 * `cursor`: absent, or text a previous page gave (its shape checked by the listing that reads it).
 * A position holding a NUL was never given: no stored text holds one (PostgreSQL refuses it, which
 * would be a database failure), while any other character may be in a stored id and so in a cursor.
 */
export function cursorOf(query: Map<string, string>): string | undefined {
  const cursor = query.get('cursor');
  if (cursor === undefined) return undefined;
  if (cursor === '' || cursor.length > CURSOR_MAX || !/^[\x21-\x7e]+$/.test(cursor) || holdsNul(decodeCursor(cursor)))
    throw new OncelyError('CURSOR_INVALID', 'cursor must be the cursor a previous page gave');
  return cursor;
}

function holdsNul(value: unknown): boolean {
  if (typeof value === 'string') return value.includes('\u0000');
  if (typeof value !== 'object' || value === null) return false;
  return Object.values(value).some(holdsNul);
}

/** A parameter that must be one of `allowed`, when given. */
export function oneOf<T extends string>(
  query: Map<string, string>,
  name: string,
  allowed: readonly T[],
): T | undefined {
  const value = query.get(name);
  if (value === undefined) return undefined;
  if (!(allowed as readonly string[]).includes(value))
    throw new InvalidArgumentError(`${name} must be one of ${allowed.join(', ')}, got ${JSON.stringify(value)}`);
  return value as T;
}

/** A name parameter (a source, a table): 1 to 128 printable ASCII characters, when given. */
export function nameOf(query: Map<string, string>, name: string): string | undefined {
  const value = query.get(name);
  if (value === undefined) return undefined;
  return checkName(value, name);
}

/** `olderThan`: a duration ('10m', '2h') or whole milliseconds. */
export function olderThanOf(query: Map<string, string>): Duration | undefined {
  const value = query.get('olderThan');
  if (value === undefined) return undefined;
  // A bad text is the engine's INVALID_ARGUMENT (toMs), with its examples.
  return /^\d{1,15}$/.test(value) ? Number(value) : (value as Duration);
}

function checkName(value: unknown, what: string): string {
  if (typeof value !== 'string' || value.length === 0 || value.length > 128 || !/^[\x21-\x7e]+$/.test(value))
    throw new InvalidArgumentError(`${what} must be 1 to 128 printable ASCII characters without spaces`);
  return value;
}

/** An id from the path (a workflow or approval id): 1 to 300 characters, none of them control characters. */
export function idOf(value: string, what: string): string {
  if (value.length === 0 || value.length > ID_MAX || CONTROL.test(value))
    throw new InvalidArgumentError(`${what} must be 1 to ${ID_MAX} characters without control characters`);
  return value;
}

/**
 * A change's Content-Type must be JSON: a form another site's page posts can only be
 * form-encoded, multipart or text/plain; a page sending JSON elsewhere must ask first (CORS
 * preflight), which the admin API never grants.
 */
export function jsonTypeOf(type: string | undefined): void {
  if (!/^application\/json\s*(;|$)/i.test(type ?? ''))
    throw new OncelyError(
      'ADMIN_JSON_REQUIRED',
      `send the body as Content-Type: application/json ({} where there are no fields), not ${type ? JSON.stringify(type.slice(0, 100)) : 'none'}`,
    );
}

/** A body as a JSON object (`{}` where there are no fields); anything else, an empty body too, is BODY_INVALID. */
export function bodyObject(bytes: Buffer): Record<string, unknown> {
  if (bytes.length === 0)
    throw new OncelyError('BODY_INVALID', 'the request body is empty: send {} where there are no fields');
  let body: unknown;
  try {
    body = JSON.parse(bytes.toString('utf8'));
  } catch {
    throw new OncelyError('BODY_INVALID', 'the request body is not JSON');
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    throw new OncelyError('BODY_INVALID', 'the request body must be a JSON object');
  return body as Record<string, unknown>;
}

/** Fields of a body beyond `allowed` are INVALID_ARGUMENT: a misspelt field must not be silently ignored. */
export function onlyFields(body: Record<string, unknown>, allowed: readonly string[]): void {
  for (const field of Object.keys(body))
    if (!allowed.includes(field))
      throw new InvalidArgumentError(
        `unknown field ${JSON.stringify(field)}${allowed.length > 0 ? ` (known: ${allowed.join(', ')})` : ''}`,
      );
}

/** Optional free text of a body (`note`, `reason`): a string of at most TEXT_MAX characters, lines but no other control characters. */
export function textField(body: Record<string, unknown>, field: string): string | undefined {
  const value = body[field];
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || value.length > TEXT_MAX || CONTROL_IN_TEXT.test(value))
    throw new InvalidArgumentError(
      `${field} must be text of at most ${TEXT_MAX} characters, without control characters`,
    );
  return value;
}

/**
 * The body of `POST records/:ref/resolve`: exactly one of `{ value }`, `{ error: { message, code? } }`
 * or `{ retry: true }`, and an optional `note`.
 */
export function resolutionOf(body: Record<string, unknown>): { resolution: Resolution; note: string | undefined } {
  onlyFields(body, ['value', 'error', 'retry', 'note']);
  const note = textField(body, 'note');
  const given = ['value', 'error', 'retry'].filter((field) => Object.hasOwn(body, field));
  if (given.length !== 1)
    throw new InvalidArgumentError('send exactly one of { value }, { error: { message, code? } } or { retry: true }');
  if (given[0] === 'value') return { resolution: { value: body.value }, note };
  if (given[0] === 'retry') {
    if (body.retry !== true) throw new InvalidArgumentError('retry must be true');
    return { resolution: 'retry', note };
  }
  const error = body.error;
  if (typeof error !== 'object' || error === null || Array.isArray(error))
    throw new InvalidArgumentError('error must be an object { message, code? }');
  const { message, code, ...rest } = error as Record<string, unknown>;
  if (Object.keys(rest).length > 0) throw new InvalidArgumentError('error takes only message and code');
  if (
    typeof message !== 'string' ||
    message.trim() === '' ||
    message.length > TEXT_MAX ||
    CONTROL_IN_TEXT.test(message)
  )
    throw new InvalidArgumentError(
      `error.message must be text of 1 to ${TEXT_MAX} characters, without control characters`,
    );
  if (code !== undefined && (typeof code !== 'string' || !/^[A-Z][A-Z0-9_]{0,63}$/.test(code)))
    throw new InvalidArgumentError('error.code must be an upper-case code such as CARD_DECLINED');
  return { resolution: { error: code === undefined ? { message } : { message, code } }, note };
}

/** The body of `POST events/dead/replay`: `{ source, id }` for one dead letter, or `{ all: true }`. */
export function replayOf(body: Record<string, unknown>): { source: string; id: string } | 'all' {
  onlyFields(body, ['source', 'id', 'all']);
  if (Object.hasOwn(body, 'all')) {
    if (body.all !== true || Object.keys(body).length !== 1)
      throw new InvalidArgumentError('send { all: true } alone, or { source, id } for one dead letter');
    return 'all';
  }
  const source = checkName(body.source, 'source');
  if (source.includes('/')) throw new InvalidArgumentError('source must be a source name, without "/"');
  if (typeof body.id !== 'string') throw new InvalidArgumentError('id must be the event id, a string');
  return { source, id: idOf(body.id, 'id') };
}

/** A record ref from the path (`recordRef`'s text, URL-encoded once more); anything else is INVALID_ARGUMENT. */
export function refOf(text: string): RecordId {
  const id = parseRecordRef(text);
  if (!id)
    throw new OncelyError(
      'INVALID_ARGUMENT',
      'a record ref is tenant/action/key, each part percent-encoded, the whole URL-encoded once more (%2F between parts)',
    );
  return id;
}

/** The envelope of the host's other routes: `{ code: 0, data }` or `{ code: <status>, error }`; NaN rates as null. */
export function answer(
  status: number,
  body: { data: unknown } | { error: { code: string; message: string } },
  headers: Record<string, string> = {},
): Response {
  const text = statsJson('data' in body ? { code: 0, data: body.data ?? null } : { code: status, error: body.error });
  return new Response(text, { status, headers: { 'content-type': 'application/json', ...headers } });
}

/** An error as answered: a catalogue code with its status; anything else is the database failing. */
export function failureOf(error: unknown): { status: number; error: { code: string; message: string } } {
  if (OncelyError.is(error))
    return { status: statusOf(error.code), error: { code: error.code, message: error.message } };
  const message = error instanceof Error ? error.message : String(error);
  return { status: 503, error: { code: 'STORE_UNAVAILABLE', message: `the database failed: ${message}` } };
}
