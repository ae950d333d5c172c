import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { encodeCursor } from '../../../src/core/cursor.js';
import type { StoredRecord } from '../../../src/core/record.js';
import { SHARD_TAGS } from '../../../src/redis/cluster.js';
import { encodeRecord } from '../../../src/redis/codec.js';
import { redisStore } from '../../../src/redis/index.js';
import { LIST_INDEX, LIST_SCAN } from '../../../src/redis/list-scripts.js';
import { listState, memberOf } from '../../../src/redis/listing.js';

/** A key of a shard's keyspace: a record's member and value, and whether it fits the query. */
type Key = { m: string; v: string; fits: boolean };

/** A shard's node: its run id's first digits, and its keys in the order its hash table holds them. */
type Node = { id: string; keys: Key[] };

/** What may go wrong during a listing, as on a live Redis. */
interface Trouble {
  // A scan call answers keys again (a table that shrank between calls, as SCAN documents).
  repeats: boolean;
  // A shard's node is replaced (a failover, a restart): another id, the same keys in another order.
  failovers: boolean;
}

/** Numbers in [0, 1) from `seed`, the same each run, so a failing trial can be run again. */
function random(seed: number): () => number {
  let s = seed;
  return () => {
    s = (s * 1_103_515_245 + 12_345) % 2_147_483_648;
    return s / 2_147_483_648;
  };
}

function shuffled<T>(items: T[], r: () => number): T[] {
  const out = items.slice();
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    [out[i], out[j]] = [out[j] as T, out[i] as T];
  }
  return out;
}

const nodeId = (r: () => number) => Math.floor(r() * 2 ** 32).toString(16);

/**
 * A listing script's answer to `args` (ARGV as LIST_SCAN and LIST_INDEX read them) on `node`:
 * a cursor given on another node starts over, as the scripts' `resume` does; the pending members
 * are read first, then scan calls of random COUNT from the cursor (an index into the node's keys)
 * until `limit` records or a random budget; what fits past the limit is pending. Answers as the
 * scripts do: cursor, pending, member-value pairs, node.
 */
function run(node: Node, args: string[], r: () => number, trouble: Trouble): [string, string[], string[], string] {
  const limit = Number(args[7]);
  const out: string[] = [];
  const pending: string[] = [];
  const take = (key: Key) => {
    if (!key.fits) return;
    if (out.length === limit * 2) pending.push(key.m);
    else out.push(key.m, key.v);
  };
  for (const m of args.slice(11)) take(node.keys.find((key) => key.m === m) as Key);
  const given = args[10] as string;
  let at = args[8] as string;
  if (at !== '' && given !== '' && given !== node.id) at = '0';
  const budget = 1 + Math.floor(r() * 30);
  for (let visited = 0; at !== '' && out.length < limit * 2 && visited < budget; ) {
    const from = Number(at);
    const count = 1 + Math.floor(r() * 8);
    for (const key of node.keys.slice(from, from + count)) take(key);
    visited += count;
    const next = trouble.repeats && r() < 0.1 ? Math.max(0, from + count - 1 - Math.floor(r() * 5)) : from + count;
    at = next >= node.keys.length ? '' : String(next);
  }
  return [at, pending, out, node.id];
}

function record(shard: number, i: number): StoredRecord {
  return {
    tenant: 't',
    action: 'a',
    key: `${shard}-${i}`,
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
}

/**
 * Pages through a listing of `trial`'s random shards with the store's own `list` (its waves, its
 * per-page `seen`, its time budget), its scripts answered by `run`: each page as members.
 */
async function listing(trial: number, trouble: Trouble): Promise<{ pages: string[][]; fitting: string[] }> {
  const r = random(trial + 1);
  const shards = trial % 4 === 0 ? 1 : 16;
  const nodes: Node[] = Array.from({ length: shards }, (_, s) => ({
    id: nodeId(r),
    keys: Array.from({ length: Math.floor(r() * 60) }, (_, i) => {
      const stored = record(s, i);
      return { m: memberOf(stored), v: encodeRecord(stored), fits: r() < 0.4 };
    }),
  }));
  const client = {
    isCluster: shards > 1,
    async call(command: string, args: string[]): Promise<unknown> {
      if (command !== 'EVALSHA' || (args[0] !== LIST_SCAN.sha && args[0] !== LIST_INDEX.sha))
        throw new Error(`not a listing script: ${command} ${args[0]}`);
      const tag = /\{([^}]*)\}/.exec(args[2] as string)?.[1];
      const shard = tag === undefined ? 0 : SHARD_TAGS.indexOf(tag);
      if (trouble.failovers && r() < 0.03) {
        const node = nodes[shard] as Node;
        nodes[shard] = { id: nodeId(r), keys: shuffled(node.keys, r) };
      }
      // A run takes up to 2.5 s of the page's 5 s budget, so pages end at random waves.
      vi.setSystemTime(Date.now() + Math.floor(r() * 2_500));
      return run(nodes[shard] as Node, args, r, trouble);
    },
  };
  const store = redisStore({ client, prefix: 'p:' });
  // `unknown` reads the index (waves of 1, 2, 4... shards), `succeeded` SCANs (1, then all).
  const query = { state: r() < 0.5 ? ('unknown' as const) : ('succeeded' as const), limit: 1 + Math.floor(r() * 12) };
  const pages: string[][] = [];
  let cursor: string | undefined;
  do {
    if (pages.length > 5_000) throw new Error(`trial ${trial}: the listing did not end`);
    const page = await store.list(cursor === undefined ? query : { ...query, cursor });
    if (page.records.length > query.limit) throw new Error(`trial ${trial}: a page past its limit`);
    pages.push(page.records.map(memberOf));
    cursor = page.cursor ?? undefined;
  } while (cursor !== undefined);
  const fitting = nodes.flatMap((node) => node.keys.filter((key) => key.fits).map((key) => key.m));
  return { pages, fitting: fitting.sort() };
}

describe('redis cluster listing cursor', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['Date'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  // Shards whose runs stop at random points, pages that end at random waves (the time budget),
  // index and SCAN listings, one shard (a single Redis) and sixteen.
  it('pages through 16 shards (and one) as list does: each fitting record exactly once', async () => {
    for (let trial = 0; trial < 600; trial++) {
      const { pages, fitting } = await listing(trial, { repeats: false, failovers: false });
      expect(pages.flat().sort(), `trial ${trial}`).toEqual(fitting);
    }
  });

  // SCAN may answer a key again, and a shard's scan may go on on another node: records may then
  // come back on a later page, but none is skipped, and a page never holds one twice.
  it('with scans that answer keys again and nodes replaced mid-listing: none missed, none twice in a page', async () => {
    let repeated = 0;
    for (let trial = 0; trial < 600; trial++) {
      const trouble = { repeats: trial % 2 === 0, failovers: trial % 3 !== 0 };
      const { pages, fitting } = await listing(trial, trouble);
      for (const page of pages)
        expect(new Set(page).size, `trial ${trial}: a page holds a record twice`).toBe(page.length);
      const listed = pages.flat();
      expect([...new Set(listed)].sort(), `trial ${trial}`).toEqual(fitting);
      repeated += listed.length - fitting.length;
    }
    // The trouble happened: records did come back on later pages.
    expect(repeated).toBeGreaterThan(0);
  });

  it('reads a cursor without nodes, as the version before wrote it, and refuses a malformed node', () => {
    const query = { limit: 10 };
    const single = encodeCursor({ s: '12', p: [] });
    expect(listState({ ...query, cursor: single }, 1)).toEqual({ index: false, at: ['12'], n: [''], p: [], k: 0 });
    const at = Array(16).fill('7');
    const cluster = encodeCursor({ s: at, p: [], k: 3 });
    expect(listState({ ...query, cursor: cluster }, 16)).toMatchObject({ at, n: Array(16).fill(''), k: 3 });
    for (const n of ['XYZ', ['ab12cd34'], 7])
      expect(() => listState({ ...query, cursor: encodeCursor({ s: '12', p: [], n }) }, 1), String(n)).toThrow(
        expect.objectContaining({ code: 'CURSOR_INVALID' }),
      );
    expect(() => listState({ ...query, cursor: encodeCursor({ s: at, p: [], k: 3, n: ['ab12cd34'] }) }, 16)).toThrow(
      expect.objectContaining({ code: 'CURSOR_INVALID' }),
    );
  });
});
