import { describe, expect, it } from 'vitest';
import type { StoredRecord } from '../../../src/core/record.js';
import { encodeRecord } from '../../../src/redis/codec.js';
import { listCursor, listRequest, listState, memberOf, openShards, takeReplies } from '../../../src/redis/listing.js';

/** A key of a shard's keyspace: a record's member and value, and whether it fits the query. */
type Key = { m: string; v: string; fits: boolean };

/** Numbers in [0, 1) from `seed`, the same each run, so a failing trial can be run again. */
function random(seed: number): () => number {
  let s = seed;
  return () => {
    s = (s * 1_103_515_245 + 12_345) % 2_147_483_648;
    return s / 2_147_483_648;
  };
}

/**
 * A listing script's answer to `args` (listRequest's) on `keys`, as LIST_SCAN gives it: the pending
 * members read first, then SCAN calls of random COUNT from the cursor until `limit` records or a
 * random budget; what fits past the limit in the last call is pending. The cursor is an index.
 */
function run(keys: Key[], args: string[], limit: number, r: () => number): [string, string[], string[]] {
  const out: string[] = [];
  const pending: string[] = [];
  const take = (key: Key) => {
    if (!key.fits) return;
    if (out.length === limit * 2) pending.push(key.m);
    else out.push(key.m, key.v);
  };
  for (const m of args.slice(10)) take(keys.find((key) => key.m === m) as Key);
  let at = args[8] as string;
  const budget = 1 + Math.floor(r() * 30);
  for (let visited = 0; at !== '' && out.length < limit * 2 && visited < budget; ) {
    const from = Number(at);
    const count = 1 + Math.floor(r() * 8);
    for (const key of keys.slice(from, from + count)) take(key);
    visited += count;
    at = from + count >= keys.length ? '' : String(from + count);
  }
  return [at, pending, out];
}

describe('redis cluster listing cursor', () => {
  // The store's page loop (RedisStore.list) over simulated shards whose runs stop at random points
  // and whose pages end at random waves (the time budget): every record once, none missed.
  it('pages through 16 shards (and one) as list does: each fitting record exactly once', () => {
    for (let trial = 0; trial < 1_000; trial++) {
      const r = random(trial + 1);
      const shards = trial % 4 === 0 ? 1 : 16;
      const data: Key[][] = Array.from({ length: shards }, (_, s) =>
        Array.from({ length: Math.floor(r() * 60) }, (_, i) => {
          const record: StoredRecord = {
            tenant: 't',
            action: 'a',
            key: `${s}-${i}`,
            state: 'succeeded',
            fingerprint: 'f',
            fence: 1,
            attempts: 1,
            leaseUntil: null,
            result: null,
            traceId: 'x',
            createdAt: 1,
            updatedAt: 1,
            completedAt: 1,
            expiresAt: null,
          };
          return { m: memberOf(record), v: encodeRecord(record), fits: r() < 0.4 };
        }),
      );
      const query = { state: 'succeeded' as const, limit: 1 + Math.floor(r() * 12) };
      const listed: string[] = [];
      let cursor: string | undefined;
      for (let page = 0; ; page++) {
        if (page > 5_000) throw new Error(`trial ${trial}: the listing did not end`);
        const state = listState(cursor === undefined ? query : { ...query, cursor }, shards);
        let count = 0;
        for (let size = 1; count < query.limit; size = shards) {
          const open = openShards(state).slice(0, size);
          if (open.length === 0 || (size > 1 && r() < 0.2)) break;
          const room = query.limit - count;
          const requests = open.map((k) => listRequest(`p${k}:`, query, state, k, room));
          const replies = requests.map((q) => run(data[q.shard] as Key[], q.args, room, r));
          const records = takeReplies(state, requests, replies, room);
          count += records.length;
          listed.push(...records.map(memberOf));
        }
        const next = listCursor(state);
        if (next === null) break;
        cursor = next;
      }
      const fitting = data.flat().filter((key) => key.fits);
      expect(listed.sort(), `trial ${trial}, limit ${query.limit}`).toEqual(fitting.map((key) => key.m).sort());
    }
  });
});
