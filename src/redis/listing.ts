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

/**
 * How long one `list` call goes on running listing scripts to fill its page (see RedisStore.list):
 * in a keyspace of millions of other keys a sparse listing stops here, with a cursor, rather
 * than hold an operator's request (the CLI, the admin API) for as long as the whole scan takes.
 */
export const LIST_TIME_BUDGET_MS = 5_000;
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
 * SCAN (LIST_SCAN), in the cursor's shard, or from the start of shard `from` instead. A cursor of
 * the other kind than the query needs is CURSOR_INVALID, as is any text no listing gave.
 */
export function listRequest(prefixes: string[], query: RecordQuery, from?: number): ListRequest {
  const { state, tenant, action, updatedBefore, limit } = query;
  if (!Number.isInteger(limit) || limit < 1 || limit > LIMIT_MAX)
    throw new InvalidArgumentError(`redis store: limit must be a whole number from 1 to ${LIMIT_MAX}`);
  if (updatedBefore !== undefined && !Number.isFinite(updatedBefore))
    throw new InvalidArgumentError('redis store: updatedBefore must be a number of epoch ms');
  const cursor =
    query.cursor === undefined || from !== undefined ? undefined : decodeListCursor(query.cursor, prefixes.length);
  const shard = from ?? cursor?.k ?? 0;
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
 * The page of the listing scripts' answers to `requests` (runs of consecutive shards, the first
 * resumed from a cursor, the others from their start), up to `limit` records, and the shard its
 * cursor starts afresh, if it does (every shard asked was read to its end, so the caller may go
 * on at once). The records are taken shard by shard: in the first shard not read to its end, or whose
 * records overflow the page, the cursor stops, the records beyond the page becoming its pending
 * members; what later shards answered is dropped, to be read again when the listing gets there.
 */
export function listPages(
  requests: ListRequest[],
  replies: unknown[],
  limit: number,
): { page: RecordPage; next?: number } {
  const out: StoredRecord[] = [];
  for (let r = 0; r < requests.length; r++) {
    const request = requests[r] as ListRequest;
    const reply = replies[r];
    if (!Array.isArray(reply)) throw new Error(`redis listing answered ${typeof reply}`);
    const [scan, pending, pairs] = reply as [unknown, unknown[], unknown[]];
    const at = String(scan);
    // A client with a Buffer type mapping answers Buffers: String() reads those too.
    const over: string[] = [];
    for (let i = 0; i < pairs.length; i += 2) {
      const m = String(pairs[i]);
      const id = parseMember(m);
      // A key under the prefix that no record of ours was stored at (written by hand) is passed over.
      if (!id) continue;
      if (out.length < limit) out.push(decodeRecord(pairs[i + 1], id));
      else over.push(m);
    }
    const p = [...over, ...pending.map(String)];
    if (at !== '' || p.length > 0) return { page: { records: out, cursor: cursorAt(request, at, p, request.shard) } };
    if (request.shard + 1 === request.shards) return { page: { records: out, cursor: null } };
  }
  const last = requests[requests.length - 1] as ListRequest;
  const next = last.shard + 1;
  return { page: { records: out, cursor: cursorAt(last, '0', [], next) }, next };
}

function cursorAt(request: ListRequest, at: string, p: string[], k: number): string {
  return encodeCursor({ ...(request.index ? { i: at } : { s: at }), p, ...(request.shards > 1 ? { k } : {}) });
}
