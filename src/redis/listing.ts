import { decodeCursor, encodeCursor, invalidCursor } from '../core/cursor.js';
import { InvalidArgumentError } from '../core/errors.js';
import type { RecordId, StoredRecord } from '../core/record.js';
import type { RecordQuery } from '../store.js';
import { decodeRecord } from './codec.js';
import { LIST_INDEX, LIST_SCAN } from './list-scripts.js';
import { INDEXED_STATES, type RedisScript } from './scripts.js';

/** A listing's script run on one shard: the script, its EVALSHA arguments and the shard. */
export interface ListRequest {
  script: RedisScript;
  args: string[];
  shard: number;
}

/**
 * Where a listing goes on: by index (SSCAN, `index`) or by SCAN, at each shard's cursor in `at`
 * ('0' from its start, '' when its scan is done) on the node `n` that gave it (the first digits
 * of its run id, '' unknown), and after the pending members `p` of shard `k` (the members a run
 * found past its page, unread). A single Redis is one shard; a cluster has SHARDS (cluster.ts),
 * each scanned on its own: a shard whose run answered nothing moves on even when another shard
 * filled the page, so a sparse listing reads each shard's part of the keyspace once, and only the
 * shard where a page ends holds pending members. A cursor is a place in one node's hash table
 * (see list-scripts.ts), so a shard's scan that goes on on another node starts over.
 */
export interface ListState {
  index: boolean;
  at: string[];
  n: string[];
  p: string[];
  k: number;
}

const LIMIT_MAX = 1_000;

/**
 * How long one `list` call goes on running listing scripts to fill its page (see RedisStore.list):
 * in a keyspace of millions of other keys a sparse listing stops here, with a cursor, rather
 * than hold an operator's request (the CLI, the admin API) for as long as the whole scan takes.
 */
export const LIST_TIME_BUDGET_MS = 5_000;
const SCAN_CURSOR = /^(0|[1-9][0-9]*)?$/;
const NODE = /^[0-9a-f]*$/;

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

/**
 * A cursor's text on a single Redis is `{ i | s: <SSCAN or SCAN cursor>, p, n: <node> }`; on a
 * cluster `{ i | s: <a cursor per shard>, p, k, n: <a node per shard> }`. A cursor of a version
 * that kept no nodes (no `n`) is read too, its nodes unknown.
 */
function decodeListCursor(text: string, shards: number): ListState {
  const value = decodeCursor(text);
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw invalidCursor();
  const c = value as Record<string, unknown>;
  const index = typeof c.i !== 'undefined';
  const raw = index ? c.i : c.s;
  const sharded = shards > 1;
  const at = sharded ? raw : [raw];
  const k = sharded ? c.k : 0;
  const n = c.n === undefined ? Array(shards).fill('') : sharded ? c.n : [c.n];
  if (
    Object.keys(value).length === (sharded ? 3 : 2) + (c.n === undefined ? 0 : 1) &&
    (typeof c.i === 'undefined') !== (typeof c.s === 'undefined') &&
    Array.isArray(at) &&
    at.length === shards &&
    at.every((a) => typeof a === 'string' && SCAN_CURSOR.test(a)) &&
    Array.isArray(n) &&
    n.length === shards &&
    n.every((node) => typeof node === 'string' && NODE.test(node)) &&
    Number.isInteger(k) &&
    (k as number) >= 0 &&
    (k as number) < shards &&
    Array.isArray(c.p) &&
    c.p.every((m) => typeof m === 'string' && parseMember(m)) &&
    (at as string[]).some((a, shard) => a !== '' || (shard === k && (c.p as string[]).length > 0))
  )
    return { index, at: at as string[], n: n as string[], p: c.p as string[], k: k as number };
  throw invalidCursor();
}

/** The cursor of `state`, or null when every shard is done. */
export function listCursor(state: ListState): string | null {
  if (openShards(state).length === 0) return null;
  const sharded = state.at.length > 1;
  return encodeCursor({
    [state.index ? 'i' : 's']: sharded ? state.at : state.at[0],
    p: state.p,
    ...(sharded ? { k: state.k } : {}),
    n: sharded ? state.n : state.n[0],
  });
}

/** The shards whose listing is not done, the one with pending members first. */
export function openShards(state: ListState): number[] {
  const open = state.at.flatMap((a, shard) => (a !== '' && shard !== state.k ? [shard] : []));
  return state.at[state.k] !== '' || state.p.length > 0 ? [state.k, ...open] : open;
}

/**
 * Where `query` starts on a store of `shards` shards: `in_progress` and `unknown` from their
 * index, every other listing by SCAN; from its cursor if it has one. A cursor of the other kind
 * than the query needs is CURSOR_INVALID, as is any text no listing gave.
 */
export function listState(query: RecordQuery, shards: number): ListState {
  const { state, updatedBefore, limit } = query;
  if (!Number.isInteger(limit) || limit < 1 || limit > LIMIT_MAX)
    throw new InvalidArgumentError(`redis store: limit must be a whole number from 1 to ${LIMIT_MAX}`);
  if (updatedBefore !== undefined && !Number.isFinite(updatedBefore))
    throw new InvalidArgumentError('redis store: updatedBefore must be a number of epoch ms');
  const index = state !== undefined && (INDEXED_STATES as readonly string[]).includes(state);
  if (query.cursor === undefined) return { index, at: Array(shards).fill('0'), n: Array(shards).fill(''), p: [], k: 0 };
  const cursor = decodeListCursor(query.cursor, shards);
  if (cursor.index !== index) throw invalidCursor();
  return cursor;
}

/**
 * The script run of `query` on shard `shard` (its keys under `prefix`), up to `limit` records:
 * from the shard's cursor in `state` (from its start on another node), its pending members read first.
 */
export function listRequest(
  prefix: string,
  query: RecordQuery,
  state: ListState,
  shard: number,
  limit: number,
): ListRequest {
  const { tenant, action, updatedBefore } = query;
  const filters = [
    query.state ?? '',
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
  const script = state.index ? LIST_INDEX : LIST_SCAN;
  const key = `${prefix}i:${state.index ? query.state : INDEXED_STATES[0]}`;
  const args = [script.sha, '1', key, ...filters, state.at[shard] as string, start, state.n[shard] as string];
  if (shard === state.k) args.push(...state.p);
  return { script, args, shard };
}

/**
 * Takes the listing scripts' answers to `requests` (shards in openShards' order) into `state`
 * and answers their records, up to `limit`. Shard by shard: while the page has room a shard's
 * records join it and its cursor moves on, the records beyond the page becoming its pending
 * members (`k`). Once the page is full, a later shard that answered nothing moves on too (it
 * found nothing to keep), and one that answered records stays where it was, to be read again.
 */
export function takeReplies(
  state: ListState,
  requests: ListRequest[],
  replies: unknown[],
  limit: number,
): StoredRecord[] {
  const out: StoredRecord[] = [];
  for (let r = 0; r < requests.length; r++) {
    const { shard } = requests[r] as ListRequest;
    const reply = replies[r];
    if (!Array.isArray(reply)) throw new Error(`redis listing answered ${typeof reply}`);
    const [scan, pending, pairs, node] = reply as [unknown, unknown[], unknown[], unknown];
    // A client with a Buffer type mapping answers Buffers: String() reads those too.
    const at = String(scan);
    const found: [string, StoredRecord][] = [];
    for (let i = 0; i < pairs.length; i += 2) {
      const m = String(pairs[i]);
      const id = parseMember(m);
      // A key under the prefix that no record of ours was stored at (written by hand) is passed over.
      if (id) found.push([m, decodeRecord(pairs[i + 1], id)]);
    }
    const full = out.length === limit;
    if (full && (found.length > 0 || pending.length > 0)) continue;
    const over = found.splice(limit - out.length).map(([m]) => m);
    out.push(...found.map(([, record]) => record));
    state.at[shard] = at;
    state.n[shard] = String(node);
    if (shard === state.k) state.p = [];
    const p = [...over, ...pending.map(String)];
    if (p.length > 0) Object.assign(state, { p, k: shard });
  }
  return out;
}
