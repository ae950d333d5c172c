import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createClient } from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RecordState, StoredRecord } from '../../../src/core/record.js';
import { redisStore } from '../../../src/redis/index.js';
import { memberOf, parseMember } from '../../../src/redis/listing.js';
import { LEASE_MARGIN_MS } from '../../../src/redis/scripts.js';
import { recordKey } from '../../../src/redis/store.js';
import type { RecordStore } from '../../../src/store.js';
import { connectRedis, dropPrefix, freshPrefix, REDIS_URL } from '../../support/redis.js';
import { startWorker } from '../../support/spawn.js';
import { until } from '../../support/wait.js';

// sleep: the helper for the one wait whose duration is the point, killed holders' leases running out.
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const prefix = freshPrefix();
let redis: Awaited<ReturnType<typeof connectRedis>>;
let n = 0;

function record(overrides: Partial<StoredRecord> = {}): StoredRecord {
  const now = Date.now();
  return {
    tenant: 'acme',
    action: 'charge',
    key: `k-${++n}`,
    state: 'in_progress',
    fingerprint: 'fp',
    fence: 1,
    attempts: 1,
    leaseUntil: now + 30_000,
    result: null,
    traceId: `trace-${n}`,
    createdAt: now,
    updatedAt: now,
    completedAt: null,
    expiresAt: now + 60_000,
    ...overrides,
  };
}

/** Every record under `p` by SCAN, read as the store reads it: its member and its state. */
async function statesUnder(p: string): Promise<Map<string, RecordState>> {
  const out = new Map<string, RecordState>();
  let cursor = '0';
  do {
    const [next, keys] = (await redis.sendCommand(['SCAN', cursor, 'MATCH', `${p}r:*`, 'COUNT', '1000'])) as [
      string,
      string[],
    ];
    cursor = String(next);
    for (const key of keys) {
      const value = String(await redis.get(key));
      out.set(key.slice(`${p}r:`.length), value.split('|')[1] as RecordState);
    }
  } while (cursor !== '0');
  return out;
}

/** The members of a state's index under `p`, each as memberOf names it (the record key past `<p>r:`). */
const members = async (p: string, state: RecordState) =>
  ((await redis.sendCommand(['SMEMBERS', `${p}i:${state}`])) as string[]).map((key) => {
    expect(String(key).startsWith(`${p}r:`)).toBe(true);
    return String(key).slice(`${p}r:`.length);
  });

beforeAll(async () => {
  redis = await connectRedis();
});

afterAll(async () => {
  await dropPrefix(redis, prefix);
  await redis.close();
});

describe('redis index of in_progress and unknown records', () => {
  it('names members by tenant, action and key, read back unambiguously whatever they hold', () => {
    for (const id of [
      { tenant: 'a:b', action: '1:c', key: 'k:2:x' },
      { tenant: 'ключ', action: 'em😀ji', key: '/' },
    ]) {
      expect(parseMember(memberOf(id))).toEqual(id);
      expect(recordKey(prefix, id)).toBe(`${prefix}r:${memberOf(id)}`);
    }
    expect(parseMember('3:ab:1:c:k')).toBeNull();
    expect(parseMember('1:a:1:c:')).toBeNull();
  });

  it('moves a record between indexes as its state changes, in the write that changes it', async () => {
    const p = `${prefix}moves:`;
    const store = redisStore({ client: redis, prefix: p });
    const r = record();
    const m = memberOf(r);
    await store.insertOrGet(r);
    expect(await members(p, 'in_progress')).toEqual([m]);
    // A write that keeps the state (a lease renewal) leaves the index alone.
    expect(await store.update(r, { fence: 1, states: ['in_progress'] }, { leaseUntil: Date.now() + 40_000 })).not.toBe(
      null,
    );
    expect(await members(p, 'in_progress')).toEqual([m]);
    await store.update(
      r,
      { fence: 1, states: ['in_progress'] },
      { state: 'unknown', leaseUntil: null, expiresAt: null },
    );
    expect(await members(p, 'in_progress')).toEqual([]);
    expect(await members(p, 'unknown')).toEqual([m]);
    // A write refused by its check moves nothing.
    expect(await store.update(r, { fence: 9, states: ['unknown'] }, { state: 'succeeded' })).toBeNull();
    expect(await members(p, 'unknown')).toEqual([m]);
    await store.update(r, { fence: 1, states: ['unknown'] }, { state: 'succeeded', result: '1' });
    expect(await members(p, 'unknown')).toEqual([]);
    expect(await members(p, 'in_progress')).toEqual([]);
    // Inserted as given: an unknown one joins its index, a finished one none.
    const u = record({ state: 'unknown', leaseUntil: null, expiresAt: null });
    await store.insertOrGet(record({ state: 'succeeded', leaseUntil: null, result: '2' }));
    await store.insertOrGet(u);
    expect(await members(p, 'unknown')).toEqual([memberOf(u)]);
    expect(await members(p, 'in_progress')).toEqual([]);
    await store.close();
  });

  it('refuses a write that would move a record into or out of an index key holding another type, writing nothing', async () => {
    const p = `${prefix}foreign:`;
    const store = redisStore({ client: redis, prefix: p });
    const u = record({ state: 'unknown', leaseUntil: null, expiresAt: null });
    expect((await store.insertOrGet(u)).inserted).toBe(true);
    await redis.del(`${p}i:unknown`);
    await redis.set(`${p}i:in_progress`, 'not a set');
    const r = record();
    const done = record({ state: 'succeeded', leaseUntil: null, result: '1' });
    // One run: the claim is refused and not written; the finished record, which joins no index, is.
    const [claim, finished] = await Promise.allSettled([store.insertOrGet(r), store.insertOrGet(done)]);
    expect(claim).toMatchObject({
      status: 'rejected',
      reason: { message: expect.stringMatching(/not an oncely index/) },
    });
    expect(finished).toMatchObject({ status: 'fulfilled', value: { inserted: true } });
    expect(await redis.exists(recordKey(p, r))).toBe(0);
    // The engine's claims (times relative to Redis's clock, their own script): refused the same way;
    // the same key claimed twice at once is refused twice, never answered with the record undone.
    const claim2 = record({ leaseUntil: 30_000, expiresAt: 60_000, createdAt: 0, updatedAt: 0 });
    const twice = await Promise.allSettled([
      store.insertOrGet(claim2, undefined, { relative: true }),
      store.insertOrGet(claim2, undefined, { relative: true }),
      store.insertOrGet({ ...done, key: 'done-relative', createdAt: 0, updatedAt: 0, completedAt: 0 }, undefined, {
        relative: true,
      }),
    ]);
    expect(twice.map((a) => a.status)).toEqual(['rejected', 'rejected', 'fulfilled']);
    expect(await redis.exists(recordKey(p, claim2))).toBe(0);
    expect(await redis.exists(recordKey(p, { ...done, key: 'done-relative' }))).toBe(1);
    // An update into the foreign index is refused; one between sound ones (unknown to succeeded) applies.
    await expect(
      store.update(u, { fence: 1, states: ['unknown'] }, { state: 'in_progress', leaseUntil: Date.now() + 1_000 }),
    ).rejects.toThrow(/not an oncely index/);
    expect((await store.get(u))?.state).toBe('unknown');
    expect(
      await store.update(u, { fence: 1, states: ['unknown'] }, { state: 'succeeded', result: '2' }),
    ).not.toBeNull();
    await redis.del(`${p}i:in_progress`);
    expect((await store.insertOrGet(r)).inserted).toBe(true);

    // A completion (in_progress to succeeded) checks no type first: its SREM fails, and the run puts
    // the record back as it was, value and expiry, beside a lease renewal in the same run that applies.
    const other = record({ tenant: 'other' });
    expect((await store.insertOrGet(other)).inserted).toBe(true);
    const stored = await redis.get(recordKey(p, r));
    const expiry = Number(await redis.sendCommand(['PEXPIRETIME', recordKey(p, r)]));
    expect(expiry).toBeGreaterThan(Date.now());
    await redis.del(`${p}i:in_progress`);
    await redis.set(`${p}i:in_progress`, 'not a set');
    const done2 = { state: 'succeeded', result: '3', leaseUntil: null } as const;
    const fence = (await store.get(r))?.fence as number;
    const renewed = Date.now() + 50_000;
    const [completion, renewal] = await Promise.allSettled([
      store.update(r, { fence, states: ['in_progress'] }, done2),
      store.update(
        other,
        { fence: (await store.get(other))?.fence as number, states: ['in_progress'] },
        { leaseUntil: renewed },
      ),
    ]);
    expect(completion).toMatchObject({
      status: 'rejected',
      reason: { message: expect.stringMatching(/not an oncely index/) },
    });
    expect(renewal).toMatchObject({ status: 'fulfilled', value: expect.any(Number) });
    expect((await store.get(other))?.leaseUntil).toBe(renewed);
    expect(await redis.get(recordKey(p, r))).toBe(stored);
    expect(Number(await redis.sendCommand(['PEXPIRETIME', recordKey(p, r)]))).toBe(expiry);
    await redis.del(`${p}i:in_progress`);
    expect(await store.update(r, { fence, states: ['in_progress'] }, done2)).not.toBeNull();
    expect((await store.get(r))?.state).toBe('succeeded');
    await store.close();
  });

  it('heals itself: a record Redis expired (PXAT) or that came back in another state leaves the index when listed', async () => {
    const p = `${prefix}heal:`;
    const store = redisStore({ client: redis, prefix: p });
    const now = Date.now();
    // A stalled claim whose lease margin runs out in 150 ms: Redis drops the key, not its member.
    const soon = { leaseUntil: now - LEASE_MARGIN_MS + 150, expiresAt: now + 100 };
    const gone = record(soon);
    const back = record(soon);
    const live = record();
    for (const r of [gone, back, live]) expect((await store.insertOrGet(r)).inserted).toBe(true);
    expect(new Set(await members(p, 'in_progress'))).toEqual(new Set([gone, back, live].map(memberOf)));
    await until(
      'Redis to expire the stalled claim',
      () => redis.exists(recordKey(p, gone)),
      (n) => n === 0,
    );
    expect(await redis.exists(recordKey(p, gone))).toBe(0);
    // The key starts again, finished (inserted as given): its old member is still in the index.
    expect((await store.insertOrGet({ ...back, state: 'succeeded', leaseUntil: null, result: '1' })).inserted).toBe(
      true,
    );
    expect((await members(p, 'in_progress')).length).toBe(3);

    const page = await store.list({ state: 'in_progress', limit: 10 });
    expect(page).toEqual({ records: [live], cursor: null });
    expect(await members(p, 'in_progress')).toEqual([memberOf(live)]);
    await store.close();
  });

  it('lists unknown among 10,000 finished records and 50 unknown from the index alone: no SCAN, one GET per member', async () => {
    // A Redis of this test's own, so its command counts are this test's alone (the shared one serves other tests).
    const server = await privateRedis();
    const client = await connectTo(server.url);
    const store = redisStore({ client, prefix: 'oncely:' });
    try {
      const now = Date.now();
      const finished = Array.from({ length: 10_000 }, (_, i) =>
        record({ key: `done-${i}`, state: 'succeeded', leaseUntil: null, result: `${i}`, completedAt: now }),
      );
      const unknown = Array.from({ length: 50 }, (_, i) =>
        record({ key: `unknown-${i}`, state: 'unknown', leaseUntil: null, expiresAt: null }),
      );
      for (let i = 0; i < finished.length; i += 1_000)
        await Promise.all(finished.slice(i, i + 1_000).map((r) => store.insertOrGet(r)));
      await Promise.all(unknown.map((r) => store.insertOrGet(r)));

      await client.sendCommand(['CONFIG', 'RESETSTAT']);
      const page = await store.list({ state: 'unknown', limit: 100 });
      const stats = commandCounts(String(await client.sendCommand(['INFO', 'commandstats'])));
      expect(page.cursor).toBeNull();
      expect(new Set(page.records.map((r) => r.key))).toEqual(new Set(unknown.map((r) => r.key)));
      expect(stats.scan ?? 0).toBe(0);
      expect(stats.get).toBe(50);
      expect(stats.sscan).toBe(1);

      // The same counting sees the SCAN of a listing the index cannot answer: the proof above can fail.
      await client.sendCommand(['CONFIG', 'RESETSTAT']);
      await store.list({ state: 'succeeded', limit: 100 });
      expect(commandCounts(String(await client.sendCommand(['INFO', 'commandstats']))).scan).toBeGreaterThan(0);
    } finally {
      await store.close();
      await client.close();
      server.stop();
    }
  }, 60_000);

  it('pages small limits over SSCAN calls that answer more members than a page holds: each record once, the rest carried in the cursor', async () => {
    const p = `${prefix}pages:`;
    const store = redisStore({ client: redis, prefix: p });
    const waiting = Array.from({ length: 300 }, (_, i) =>
      record({ tenant: i % 2 ? 'acme' : 'beta', key: `u-${i}`, state: 'unknown', leaseUntil: null, expiresAt: null }),
    );
    await Promise.all(waiting.map((r) => store.insertOrGet(r)));
    let carried = 0;
    for (const [limit, tenant] of [
      [1, undefined],
      [7, undefined],
      [3, 'acme'],
    ] as const) {
      const seen = new Set<string>();
      let cursor: string | undefined;
      for (let pages = 0; pages < 1_000; pages++) {
        const page = await store.list({
          state: 'unknown',
          limit,
          ...(tenant ? { tenant } : {}),
          ...(cursor ? { cursor } : {}),
        });
        expect(page.records.length).toBeLessThanOrEqual(limit);
        for (const r of page.records) {
          expect(seen.has(r.key), r.key).toBe(false);
          seen.add(r.key);
        }
        if (page.cursor === null) break;
        cursor = page.cursor;
        carried += (JSON.parse(Buffer.from(cursor, 'base64url').toString()) as { p: string[] }).p.length;
      }
      expect(seen).toEqual(new Set(waiting.filter((r) => !tenant || r.tenant === tenant).map((r) => r.key)));
    }
    // SSCAN answered more than the page had room for, and those records came on a later page.
    expect(carried).toBeGreaterThan(0);
    // A cursor of the index is no cursor of a SCAN listing, nor the other way round.
    const first = (await store.list({ state: 'unknown', limit: 1 })).cursor as string;
    await expect(store.list({ state: 'failed', limit: 1, cursor: first })).rejects.toMatchObject({
      code: 'CURSOR_INVALID',
    });
    await store.close();
  });

  it('stays exact when two processes race on the same keys, are killed with SIGKILL, and two more settle them', async () => {
    const p = `${prefix}race:`;
    const script = fileURLToPath(new URL('./index-race-worker.ts', import.meta.url));
    const job = { url: REDIS_URL, prefix: p, keys: 300, lease: 400 };
    const racers = [1, 2].map((seed) => startWorker({ ...job, mode: 'race', seed }, script));
    await Promise.all(racers.map((w) => w.waitFor('half')));
    for (const w of racers) w.child.kill('SIGKILL');
    await Promise.all(racers.map((w) => w.exited));

    const afterRace = await statesUnder(p);
    const held = [...afterRace].filter(([, state]) => state === 'in_progress').map(([m]) => m);
    // Killed holders leave claims behind: the race reached the window the index must survive.
    expect(held.length).toBeGreaterThan(0);
    expect(new Set(await members(p, 'in_progress'))).toEqual(new Set(held));

    // Once the killed holders' leases ran out, two processes call every key again: under 'hold'
    // the abandoned claims turn unknown, the rest run or replay.
    // sleep: the killed holders' leases must run out.
    await sleep(job.lease + 200);
    const settlers = [3, 4].map((seed) => startWorker({ ...job, mode: 'settle', seed }, script));
    const summaries = (await Promise.all(settlers.map((w) => w.waitFor('{')))).map(
      (line) => JSON.parse(line) as Record<string, number>,
    );
    await Promise.all(settlers.map((w) => w.exited));
    expect(summaries.reduce((sum, s) => sum + (s.OUTCOME_UNKNOWN ?? 0), 0)).toBeGreaterThan(0);

    const states = await statesUnder(p);
    const having = (state: RecordState) => new Set([...states].filter(([, s]) => s === state).map(([m]) => m));
    expect(having('unknown').size).toBeGreaterThan(0);
    expect(new Set(await members(p, 'unknown'))).toEqual(having('unknown'));
    expect(new Set(await members(p, 'in_progress'))).toEqual(having('in_progress'));
    const store: RecordStore = redisStore({ client: redis, prefix: p });
    const listed = await store.list({ state: 'unknown', limit: 1_000 });
    expect(new Set(listed.records.map(memberOf))).toEqual(having('unknown'));
    await store.close();
  }, 60_000);
});

describe('redis listing by SCAN', () => {
  it('pages small limits over SCAN calls that answer more keys than a page holds: each record once, the rest carried in the cursor', async () => {
    const p = `${prefix}scan:`;
    const store = redisStore({ client: redis, prefix: p });
    const done = Array.from({ length: 300 }, (_, i) =>
      record({ tenant: i % 2 ? 'acme' : 'beta', key: `s-${i}`, state: 'failed', leaseUntil: null, result: `${i}` }),
    );
    await Promise.all(done.map((r) => store.insertOrGet(r)));
    let carried = 0;
    for (const [limit, tenant] of [
      [1, undefined],
      [7, undefined],
      [3, 'acme'],
    ] as const) {
      const seen = new Set<string>();
      let cursor: string | undefined;
      for (let pages = 0; pages < 1_000; pages++) {
        const page = await store.list({ limit, ...(tenant ? { tenant } : {}), ...(cursor ? { cursor } : {}) });
        expect(page.records.length).toBeLessThanOrEqual(limit);
        for (const r of page.records) {
          expect(seen.has(r.key), r.key).toBe(false);
          seen.add(r.key);
        }
        if (page.cursor === null) break;
        cursor = page.cursor;
        carried += (JSON.parse(Buffer.from(cursor, 'base64url').toString()) as { p: string[] }).p.length;
      }
      expect(seen).toEqual(new Set(done.filter((r) => !tenant || r.tenant === tenant).map((r) => r.key)));
    }
    // SCAN answered more than the page had room for, and those records came on the next page.
    expect(carried).toBeGreaterThan(0);
    await store.close();
  });
});

describe('redis listing across a restart', () => {
  it('starts a scan over on a restarted Redis, whose hash table is laid out anew: every record listed, none twice in a page', async () => {
    const server = await privateRedis();
    let store = redisStore({ url: server.url, prefix: 'oncely:' });
    try {
      const all = Array.from({ length: 600 }, (_, i) =>
        i % 2
          ? record({ key: `f-${i}`, state: 'failed', leaseUntil: null, result: `${i}` })
          : record({ key: `u-${i}`, state: 'unknown', leaseUntil: null, expiresAt: null }),
      );
      await Promise.all(all.map((r) => store.insertOrGet(r)));
      // By SCAN, and by SSCAN of the index: both cursors are places in one process's tables.
      for (const query of [{ limit: 40 }, { state: 'unknown' as const, limit: 40 }]) {
        const pages: string[][] = [];
        let cursor: string | undefined;
        do {
          if (pages.length === 3) {
            await server.restart();
            // A new process: the store's own client does not reconnect, another store goes on from the cursor.
            await store.close();
            store = redisStore({ url: server.url, prefix: 'oncely:' });
          }
          const page = await store.list(cursor === undefined ? query : { ...query, cursor });
          pages.push(page.records.map(memberOf));
          cursor = page.cursor ?? undefined;
        } while (cursor !== undefined && pages.length < 100);
        expect(cursor, JSON.stringify(query)).toBeUndefined();
        for (const page of pages) expect(new Set(page).size, JSON.stringify(query)).toBe(page.length);
        const listed = pages.flat();
        const want = all.filter((r) => !query.state || r.state === query.state).map(memberOf);
        expect(new Set(listed), JSON.stringify(query)).toEqual(new Set(want));
        // The scan started over on the new process: the first pages' records came again.
        expect(listed.length, JSON.stringify(query)).toBeGreaterThan(want.length);
      }
    } finally {
      await store.close();
      server.stop();
    }
  }, 60_000);
});

/** `INFO commandstats` as calls per command. */
function commandCounts(info: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const match of info.matchAll(/^cmdstat_([a-z|]+):calls=(\d+)/gm)) out[match[1] as string] = Number(match[2]);
  return out;
}

/**
 * A redis-server of its own on a free port, saving nothing unless told. `restart` SAVEs, kills it
 * and starts it again from that save: the same keys in a new process, with another run id and
 * another hash seed.
 */
async function privateRedis(): Promise<{ url: string; restart(): Promise<void>; stop(): void }> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'oncely-redis-'));
  const url = `redis://127.0.0.1:${port}`;
  const start = async () => {
    const child: ChildProcess = spawn(
      'redis-server',
      ['--port', String(port), '--save', '', '--appendonly', 'no', '--dir', dir],
      { stdio: 'ignore' },
    );
    await until(`the private redis-server on ${url} to accept connections`, async () => {
      await (await connectTo(url)).close();
      return true;
    });
    return child;
  };
  let child = await start();
  return {
    url,
    async restart() {
      const client = await connectTo(url);
      await client.sendCommand(['SAVE']);
      await client.close();
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGKILL');
      await exited;
      child = await start();
    },
    stop() {
      child.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function connectTo(url: string) {
  const client = createClient({ url, socket: { reconnectStrategy: false } });
  client.on('error', () => {});
  await client.connect();
  return client;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}
