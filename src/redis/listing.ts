import { decodeCursor, encodeCursor, invalidCursor } from '../core/cursor.js';
import { InvalidArgumentError } from '../core/errors.js';
import type { RecordId, StoredRecord } from '../core/record.js';
import type { RecordPage, RecordQuery } from '../store.js';
import { decodeRecord } from './codec.js';
import { LIST_INDEX, LIST_SCAN } from './list-scripts.js';
import { INDEXED_STATES, type RedisScript } from './scripts.js';

/**
 * A listing as its script runs it: the script, its EVALSHA arguments, which of the two it is, and
 * the shard it reads of how many (see cluster.ts; a single Redis is one shard).
 */
export interface ListRequest {
  script: RedisScript;
  args: string[];
  index: boolean;
  shard: number;
  shards: number;
}

/**
 * Where a listing goes on: at an SSCAN cursor of its index (`i`) or a SCAN cursor of the keyspace
 * (`s`), '' when that scan is done, after its pending members (`p`) in either case; on a cluster,
 * in shard `k` (absent on a single Redis, so its cursors are those it always gave).
 */
type Cursor = ({ i: string } | { s: string }) & { p: string[]; k?: number };

const LIMIT_MAX = 1_000;
const SCAN_CURSOR = /^(0|[1-9][0-9]*)?$/;

/** A record's name in listings and cursors: its key past `<prefix>r:` (see recordKey in codec.ts). */
export function memberOf(id: RecordId): string {
  return `${id.tenant.length}:${id.tenant}:${id.action.length}:${id.action}:${id.key}`;
}

/** Reads memberOf's text back (the lengths make it unambiguous); null when it is not one. */
export function parseMember(m: string): RecordId | null {
  const tenant = part(m, 0);
  if (!tenant) return null;
  const action = part(m, tenant.end);
  if (!action) return null;
  const key = m.slice(action.end);
  return key ? { tenant: tenant.text, action: action.text, key } : null;
}

/** One `<len>:<text>:` from `at`, and where the next part starts. */
function part(m: string, at: number): { text: string; end: number } | null {
  const colon = m.indexOf(':', at);
  const digits = m.slice(at, colon);
  if (colon < 0 || !/^(0|[1-9][0-9]*)$/.test(digits)) return null;
  const start = colon + 1;
  const end = start + Number(digits);
  if (end === start || m[end] !== ':') return null;
  return { text: m.slice(start, end), end: end + 1 };
}

function decodeListCursor(text: string, shards: number): Cursor {
  const value = decodeCursor(text);
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw invalidCursor();
  const fields = Object.keys(value);
  const c = value as Record<string, unknown>;
  const at = typeof c.i === 'string' ? c.i : c.s;
  const sharded = shards > 1;
  if (
    fields.length === (sharded ? 3 : 2) &&
    (!sharded || (Number.isInteger(c.k) && (c.k as number) >= 0 && (c.k as number) < shards)) &&
    (typeof c.i === 'string') !== (typeof c.s === 'string') &&
    typeof at === 'string' &&
    SCAN_CURSOR.test(at) &&
    Array.isArray(c.p) &&
    c.p.every((m) => typeof m === 'string' && parseMember(m)) &&
    (at !== '' || c.p.length > 0)
  )
    return {
      ...(typeof c.i === 'string' ? { i: at } : { s: at }),
      p: c.p as string[],
      ...(sharded ? { k: c.k as number } : {}),
    };
  throw invalidCursor();
}

/**
 * The script run of one page of `query` on the store whose shards are under `prefixes` (one on a
 * single Redis): `in_progress` and `unknown` from their index (LIST_INDEX), every other listing by
 * SCAN (LIST_SCAN), in the cursor's shard. A cursor of the other kind than the query needs is
 * CURSOR_INVALID, as is any text no listing gave.
 */
export function listRequest(prefixes: string[], query: RecordQuery): ListRequest {
  const { state, tenant, action, updatedBefore, limit } = query;
  if (!Number.isInteger(limit) || limit < 1 || limit > LIMIT_MAX)
    throw new InvalidArgumentError(`redis store: limit must be a whole number from 1 to ${LIMIT_MAX}`);
  if (updatedBefore !== undefined && !Number.isFinite(updatedBefore))
    throw new InvalidArgumentError('redis store: updatedBefore must be a number of epoch ms');
  const cursor = query.cursor === undefined ? undefined : decodeListCursor(query.cursor, prefixes.length);
  const shard = cursor?.k ?? 0;
  const prefix = prefixes[shard] as string;
  const at = { shard, shards: prefixes.length };
  const filters = [
    state ?? '',
    tenant === undefined ? '' : `=${tenant}`,
    action === undefined ? '' : `=${action}`,
    updatedBefore === undefined ? '' : String(updatedBefore),
    String(limit),
  ];
  // The keys of a tenant (and action) share this start past `<prefix>r:`: the lengths make it theirs alone.
  const start =
    tenant === undefined
      ? ''
      : `${tenant.length}:${tenant}:${action === undefined ? '' : `${action.length}:${action}:`}`;
  if (state !== undefined && (INDEXED_STATES as readonly string[]).includes(state)) {
    if (cursor && !('i' in cursor)) throw invalidCursor();
    const args = [LIST_INDEX.sha, '1', `${prefix}i:${state}`, ...filters, cursor ? cursor.i : '0', start];
    if (cursor) for (const m of cursor.p) args.push(m);
    return { script: LIST_INDEX, args, index: true, ...at };
  }
  if (cursor && !('s' in cursor)) throw invalidCursor();
  const args = [LIST_SCAN.sha, '1', `${prefix}i:${INDEXED_STATES[0]}`, ...filters, cursor ? cursor.s : '0', start];
  if (cursor) for (const m of cursor.p) args.push(m);
  return { script: LIST_SCAN, args, index: false, ...at };
}

/**
 * The page of a listing script's answer to `request`, and whether its cursor starts the next
 * shard (the request's shard was read to its end, so the caller may go on at once).
 */
export function listPage(request: ListRequest, reply: unknown): { page: RecordPage; fresh: boolean } {
  if (!Array.isArray(reply)) throw new Error(`redis listing answered ${typeof reply}`);
  const [scan, pending, pairs] = reply as [unknown, unknown[], unknown[]];
  let at = String(scan);
  let p = pending.map(String);
  let k = request.shard;
  const done = at === '' && p.length === 0;
  if (done && k + 1 === request.shards) return { page: { records: records(pairs), cursor: null }, fresh: false };
  if (done) [at, p, k] = ['0', [], k + 1];
  const cursor = { ...(request.index ? { i: at } : { s: at }), p, ...(request.shards > 1 ? { k } : {}) };
  return { page: { records: records(pairs), cursor: encodeCursor(cursor) }, fresh: done };
}

// A client with a Buffer type mapping answers Buffers: String() reads those too.
function records(pairs: unknown[]): StoredRecord[] {
  const out: StoredRecord[] = [];
  for (let i = 0; i < pairs.length; i += 2) {
    const id = parseMember(String(pairs[i]));
    // A key under the prefix that no record of ours was stored at (written by hand) is passed over.
    if (id) out.push(decodeRecord(pairs[i + 1], id));
  }
  return out;
}
