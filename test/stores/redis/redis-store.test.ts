import { once } from 'node:events';
import net from 'node:net';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OncelyError } from '../../../src/core/errors.js';
import type { RecordId, StoredRecord } from '../../../src/core/record.js';
import { createOncely, fingerprint } from '../../../src/index.js';
import { redisStore } from '../../../src/redis/index.js';
import { INDEX_KEYS, LEASE_MARGIN_MS } from '../../../src/redis/scripts.js';
import { MAX_BATCH, recordKey } from '../../../src/redis/store.js';
import { connectRedis, dropPrefix, freshPrefix, REDIS_URL } from '../../support/redis.js';
import { until } from '../../support/wait.js';

const prefix = freshPrefix();
let redis: Awaited<ReturnType<typeof connectRedis>>;
let io: Redis;
let n = 0;

function record(overrides: Partial<StoredRecord> = {}): StoredRecord {
  const now = Date.now();
  return {
    tenant: 't1',
    action: 'charge',
    key: `k-${++n}`,
    state: 'in_progress',
    fingerprint: 'fp-1',
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

const pttl = (id: RecordId) => redis.pTTL(recordKey(prefix, id));

/** A TCP proxy to the real Redis on `port` (0: any) that can drop its connections or stop forwarding, like a hung server. */
async function redisProxy(port = 0) {
  const sockets = new Set<net.Socket>();
  let paused = false;
  const server = net.createServer((inbound) => {
    const outbound = net.connect(6379, '127.0.0.1');
    for (const s of [inbound, outbound]) {
      sockets.add(s);
      s.on('error', () => {});
      s.on('close', () => sockets.delete(s));
    }
    inbound.on('data', (chunk) => paused || outbound.write(chunk));
    outbound.pipe(inbound);
  });
  server.listen(port, '127.0.0.1');
  await once(server, 'listening');
  return {
    port: (server.address() as net.AddressInfo).port,
    pause: (value: boolean) => {
      paused = value;
    },
    drop: () => {
      for (const s of sockets) s.destroy();
    },
    close: () => {
      server.close();
      for (const s of sockets) s.destroy();
    },
  };
}

beforeAll(async () => {
  redis = await connectRedis();
  io = new Redis(REDIS_URL);
});

afterAll(async () => {
  await dropPrefix(redis, prefix);
  await redis.close();
  io.disconnect();
});

describe('redis store', () => {
  it('inserts once and returns the existing record to a duplicate', async () => {
    const store = redisStore({ client: redis, prefix });
    const first = record({ result: '{"ok":1}' });
    expect(await store.insertOrGet(first)).toEqual({ inserted: true, record: first, now: expect.any(Number) });
    const again = await store.insertOrGet({ ...first, fingerprint: 'fp-2', fence: 9 });
    expect(again).toEqual({ inserted: false, record: first, now: expect.any(Number) });
    expect(await store.get(first)).toEqual(first);
    expect(await store.get({ ...first, key: 'absent' })).toBeNull();
  });

  it('lets exactly one of 200 concurrent inserts of one id win', async () => {
    const store = redisStore({ client: redis, prefix });
    const base = record();
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, i) => store.insertOrGet({ ...base, fingerprint: `fp-${i}` })),
    );
    const winners = results.filter((r) => r.inserted);
    expect(winners).toHaveLength(1);
    const winner = winners[0]?.record.fingerprint;
    expect(results.every((r) => r.record.fingerprint === winner)).toBe(true);
  });

  it('applies an update only when fence, state and lease match', async () => {
    const store = redisStore({ client: redis, prefix });
    const r = record({ fence: 3, leaseUntil: 1_000 });
    await store.insertOrGet(r);
    const done = { state: 'succeeded' as const, result: '{"v":1}', leaseUntil: null, completedAt: 2_000 };
    expect(await store.update(r, { fence: 2, states: ['in_progress'] }, done)).toBeNull();
    expect(await store.update(r, { fence: 3, states: ['released', 'unknown'] }, done)).toBeNull();
    expect(await store.update(r, { fence: 3, states: ['in_progress'], leaseUntil: 999 }, done)).toBeNull();
    expect(await store.update(r, { fence: 3, states: ['in_progress'], leaseUntil: null }, done)).toBeNull();
    expect(await store.update({ ...r, key: 'absent' }, { fence: 3, states: ['in_progress'] }, done)).toBeNull();
    expect(await store.get(r)).toEqual(r);

    expect(await store.update(r, { fence: 3, states: ['released', 'in_progress'], leaseUntil: 1_000 }, done)).toEqual(
      expect.any(Number),
    );
    const after = await store.get(r);
    expect(after).toEqual({ ...r, ...done });
    // A null is stored as an empty field: the lease is gone, not kept as text.
    expect(await redis.get(recordKey(prefix, r))).toBe(
      `o1|succeeded|3||${r.expiresAt}|1|${r.createdAt}|${r.updatedAt}|2000|fp-1|${r.traceId}|{"v":1}`,
    );

    // A null expected lease matches an absent one, and a number does not.
    expect(await store.update(r, { fence: 3, states: ['succeeded'], leaseUntil: 5 }, { attempts: 2 })).toBeNull();
    expect(await store.update(r, { fence: 3, states: ['succeeded'], leaseUntil: null }, { attempts: 2 })).toEqual(
      expect.any(Number),
    );
    expect((await store.get(r))?.attempts).toBe(2);
  });

  it('stores a result holding the field separator, and refuses a fingerprint or trace id holding it', async () => {
    const store = redisStore({ client: redis, prefix });
    const r = record({ result: '{"a":"x|y||z"}' });
    await store.insertOrGet(r);
    expect(await store.get(r)).toEqual(r);
    for (const bad of [record({ fingerprint: 'a|b' }), record({ traceId: '~' })]) {
      await expect(store.insertOrGet(bad)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      expect(await store.get(bad)).toBeNull();
    }
    const held = { fence: 1, states: ['in_progress' as const] };
    await expect(store.update(r, held, { fingerprint: 'x|y' })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(store.update(r, held, { result: '~' })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(await store.get(r)).toEqual(r);
  });

  it('keeps ids apart when tenant, action or key contain the separator', async () => {
    const store = redisStore({ client: redis, prefix });
    const a = record({ tenant: 'a:b', action: 'c', key: 'x' });
    const b = record({ tenant: 'a', action: 'b:c', key: 'x' });
    const c = record({ tenant: 'a', action: 'b', key: 'c:x' });
    for (const r of [a, b, c]) expect((await store.insertOrGet(r)).inserted).toBe(true);
    for (const r of [a, b, c]) expect((await store.get(r))?.traceId).toBe(r.traceId);
  });

  it('relative writes of different shapes in one run each get their own times, fence and expiry', async () => {
    const store = redisStore({ client: redis, prefix });
    const near = (ms: number) => expect.toSatisfy((v: number) => Math.abs(v - ms) < 2_000);
    const relative = { relative: true };
    // One burst, so one script run: leases, TTLs and the kept lease margin differ per record.
    const shapes = [
      record({ leaseUntil: 10_000, expiresAt: 600_000, createdAt: 0, updatedAt: 0 }),
      record({ leaseUntil: 120_000, expiresAt: 60_000, createdAt: 0, updatedAt: 0 }),
      record({ leaseUntil: 10_000, expiresAt: 600_000, createdAt: 0, updatedAt: 0 }),
      record({ state: 'unknown', leaseUntil: null, expiresAt: 5_000, createdAt: 0, updatedAt: 0 }),
    ];
    const claims = await Promise.all(shapes.map((r) => store.insertOrGet(r, undefined, relative)));
    const now = claims[0]?.now as number;
    for (const [i, c] of claims.entries()) {
      const given = shapes[i] as StoredRecord;
      expect(c.inserted).toBe(true);
      expect(c.now).toBe(now);
      expect(c.record.fence).toBeGreaterThan(now * 1000 - 5_000_000);
      expect(await store.get(c.record)).toEqual(c.record);
      expect(c.record.leaseUntil).toBe(given.leaseUntil === null ? null : now + Number(given.leaseUntil));
      expect(c.record.expiresAt).toBe(now + Number(given.expiresAt));
    }
    expect(await pttl(shapes[0] as StoredRecord)).toEqual(near(600_000));
    expect(await pttl(shapes[1] as StoredRecord)).toEqual(near(120_000 + LEASE_MARGIN_MS));
    expect(await pttl(shapes[3] as StoredRecord)).toBe(-1);
    // Two patches of different shapes in one run: a completion and a renewal.
    const [a, b] = claims.map((c) => c.record) as [StoredRecord, StoredRecord];
    const [done, renewed] = await Promise.all([
      store.update(
        a,
        { fence: a.fence, states: ['in_progress'], leaseUntil: a.leaseUntil },
        { state: 'succeeded', result: '"x|y"', leaseUntil: null, completedAt: 0, updatedAt: 0, expiresAt: 30_000 },
        undefined,
        relative,
      ),
      store.update(
        b,
        { fence: b.fence, states: ['in_progress'] },
        { leaseUntil: 5_000, updatedAt: 0 },
        undefined,
        relative,
      ),
    ]);
    expect(done).toBe(renewed);
    const t = done as number;
    expect(await store.get(a)).toEqual({
      ...a,
      state: 'succeeded',
      result: '"x|y"',
      leaseUntil: null,
      completedAt: t,
      updatedAt: t,
      expiresAt: t + 30_000,
    });
    expect(await store.get(b)).toEqual({ ...b, leaseUntil: t + 5_000, updatedAt: t });
    expect(await pttl(a)).toEqual(near(30_000));
    expect(await pttl(b)).toEqual(near(5_000 + LEASE_MARGIN_MS));
  });

  it('sets the Redis expiry from state, TTL and lease after every write', async () => {
    const store = redisStore({ client: redis, prefix });
    const now = Date.now();
    const near = (ms: number) => expect.toSatisfy((v: number) => Math.abs(v - ms) < 2_000);

    // An in_progress record outlives its lease by LEASE_MARGIN_MS, whatever its TTL.
    const leased = record({ leaseUntil: now + 120_000, expiresAt: now + 60_000 });
    await store.insertOrGet(leased);
    expect(await pttl(leased)).toEqual(near(120_000 + LEASE_MARGIN_MS));

    const shortLease = record({ leaseUntil: now + 10_000, expiresAt: now + 600_000 });
    await store.insertOrGet(shortLease);
    expect(await pttl(shortLease)).toEqual(near(600_000));

    const done = { state: 'succeeded' as const, leaseUntil: null, expiresAt: now + 30_000 };
    await store.update(leased, { fence: 1, states: ['in_progress'] }, done);
    expect(await pttl(leased)).toEqual(near(30_000));

    await store.update(leased, { fence: 1, states: ['succeeded'] }, { expiresAt: null });
    expect(await pttl(leased)).toBe(-1);

    const permanent = record({ state: 'succeeded', leaseUntil: null, expiresAt: null });
    await store.insertOrGet(permanent);
    expect(await pttl(permanent)).toBe(-1);

    const unknown = record({ state: 'unknown', leaseUntil: null, expiresAt: now + 30_000 });
    await store.insertOrGet(unknown);
    expect(await pttl(unknown)).toBe(-1);

    await store.update(shortLease, { fence: 1, states: ['in_progress'] }, { state: 'unknown', leaseUntil: null });
    expect(await pttl(shortLease)).toBe(-1);
  });

  it('defect 11.14: a fence never goes back when an in-progress Redis key outlives its TTL', async () => {
    const store = redisStore({ client: redis, prefix });
    const once = await createOncely({ store, tenant: 't1', defaults: { ttl: 50, lease: 100 } });
    // A holder that claimed with a TTL shorter than its lease, then stalled (a long GC pause).
    const stale = record({ leaseUntil: Date.now() + 100, expiresAt: Date.now() + 50, fingerprint: fingerprint(null) });
    await store.insertOrGet(stale);
    // sleep: past both the 50 ms TTL and the 100 ms lease, the window this defect is about.
    await new Promise((resolve) => setTimeout(resolve, 200));
    // Past both: the claim is still there to take over (it used to vanish at lease end, and the
    // next caller got fence 1 again).
    const taken = await once.run({ action: stale.action, key: stale.key }, (ctx) => ctx.fence);
    expect(taken.value).toBe(stale.fence + 1);
    // The stalled holder wakes up and completes with fence 1: refused.
    const late = { state: 'succeeded' as const, result: '{"v":"stale"}', leaseUntil: null };
    expect(await store.update(stale, { fence: 1, states: ['in_progress', 'unknown'] }, late)).toBeNull();
    // Even once the record itself is gone (it expired), the key's next claim starts above every
    // fence issued: at Redis's clock in microseconds.
    await redis.del(recordKey(prefix, stale));
    const before = Date.now() * 1000;
    const again = await once.run({ action: stale.action, key: stale.key }, (ctx) => ctx.fence);
    expect(again.value).toBeGreaterThan(taken.value);
    expect(Math.abs(again.value - before)).toBeLessThan(5_000_000);
    expect(await store.update(stale, { fence: 2, states: ['in_progress', 'unknown'] }, late)).toBeNull();
    const third = await once.run({ action: stale.action, key: `${stale.key}-next` }, (ctx) => ctx.fence);
    expect(third.value).toBeGreaterThan(again.value);
  });

  it('defect 11.9: a store blip at completion does not re-run the effect: the completion is retried and lands', async () => {
    const proxy = await redisProxy();
    const store = redisStore({ url: `redis://127.0.0.1:${proxy.port}`, prefix, timeout: 100 });
    const once = await createOncely({ store, defaults: { lease: '5s' } });
    let runs = 0;
    const charge = () =>
      once.run({ action: 'charge', key: `blip-${++n}` }, async () => {
        runs++;
        // Redis is unreachable for half a second right after the effect: connections cut, nothing forwarded.
        proxy.pause(true);
        proxy.drop();
        setTimeout(() => proxy.pause(false), 500);
        return { charged: runs };
      });
    const first = await charge();
    expect(first).toMatchObject({ replayed: false, value: { charged: 1 } });
    const again = await once.run({ action: 'charge', key: first.record.key }, async () => ++runs);
    expect(again).toMatchObject({ replayed: true, value: { charged: 1 } });
    // The retried completion's record is the stored one, times included.
    expect(again.record).toEqual(first.record);
    expect(runs).toBe(1);
    await once.close();
    proxy.close();
  });

  it('defect 11.9: a longer outage at completion is OUTCOME_NOT_STORED carrying the value, never "nothing ran"', async () => {
    const proxy = await redisProxy();
    const store = redisStore({ url: `redis://127.0.0.1:${proxy.port}`, prefix, timeout: 100 });
    const once = await createOncely({ store, defaults: { lease: '5s', completionRetry: 300 } });
    const key = `outage-${++n}`;
    const error = await once
      .run({ action: 'charge', key }, async () => {
        proxy.pause(true);
        proxy.drop();
        return { charged: true };
      })
      .catch((e: unknown) => e);
    proxy.pause(false);
    expect(error).toMatchObject({ code: 'OUTCOME_NOT_STORED', value: { charged: true } });
    // Checked straight on Redis, not through the proxy and its 100 ms timeout (a reconnect on a
    // loaded machine may take longer): the claim is still held, so nobody runs the effect again.
    const direct = await createOncely({ store: redisStore({ client: redis, prefix }), defaults: { lease: '5s' } });
    await expect(direct.run({ action: 'charge', key }, async () => 'again')).rejects.toMatchObject({
      code: 'IN_PROGRESS',
    });
    await direct.close();
    await once.close();
    proxy.close();
  });

  it('answers a completion sent again after it applied (a resend over a failover) as applied, at its first clock', async () => {
    const store = redisStore({ client: redis, prefix });
    const relative = { relative: true };
    const claim = record({ leaseUntil: 5_000, expiresAt: 60_000, createdAt: 0, updatedAt: 0 });
    const { record: claimed } = await store.insertOrGet(claim, undefined, relative);
    const held = { fence: claimed.fence, states: ['in_progress' as const] };
    const outcome = { state: 'succeeded' as const, result: '{"v":1}', leaseUntil: null, completedAt: 0, updatedAt: 0 };
    const first = Number(await store.update(claimed, held, outcome, undefined, relative));
    expect(first).toBeGreaterThan(0);
    const stored = await store.get(claimed);
    expect(stored).toMatchObject({ state: 'succeeded', result: '{"v":1}', completedAt: first, updatedAt: first });
    // The same write again, as ioredis resends it: applied, at the first write's clock, nothing changed.
    expect(await store.update(claimed, held, outcome, undefined, relative)).toBe(first);
    expect(await store.get(claimed)).toEqual(stored);
    // Not its own outcome: another result, another state, another fence, or a settlement stored since.
    expect(await store.update(claimed, held, { ...outcome, result: '{"v":2}' }, undefined, relative)).toBeNull();
    expect(await store.update(claimed, held, { ...outcome, state: 'failed' }, undefined, relative)).toBeNull();
    expect(await store.update(claimed, { ...held, fence: claimed.fence - 1 }, outcome, undefined, relative)).toBeNull();
    const settled = { by: 'op', at: first, answer: 'value' as const };
    expect(
      await store.update(claimed, { fence: claimed.fence, states: ['succeeded'] }, { settlement: settled }),
    ).not.toBeNull();
    expect(await store.update(claimed, held, outcome, undefined, relative)).toBeNull();
  });

  it('lets Redis drop a record once its expiresAt has passed', async () => {
    const store = redisStore({ client: redis, prefix });
    const r = record({ state: 'succeeded', leaseUntil: null, expiresAt: Date.now() + 50 });
    await store.insertOrGet(r);
    await until(
      'Redis to drop the expired record',
      () => redis.exists(recordKey(prefix, r)),
      (n) => n === 0,
    );
    expect(await redis.exists(recordKey(prefix, r))).toBe(0);
    expect(await store.get(r)).toBeNull();
    expect(await store.purgeExpired(Date.now(), 100)).toBe(0);
    expect((await store.insertOrGet(r)).inserted).toBe(true);
  });

  it('refuses to join a transaction', async () => {
    const store = redisStore({ client: redis, prefix });
    const r = record();
    for (const call of [
      () => store.insertOrGet(r, {}),
      () => store.update(r, { fence: 1, states: ['in_progress'] }, {}, {}),
      () => store.get(r, null),
    ]) {
      await expect(call()).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    }
  });

  it('rejects options with neither or both of url and client', () => {
    expect(() => redisStore({} as never)).toThrow(OncelyError);
    expect(() => redisStore({ url: REDIS_URL, client: redis } as never)).toThrow(OncelyError);
  });

  it('reloads its scripts after SCRIPT FLUSH, on ioredis and on a RESP2 node-redis client', async () => {
    const resp2 = await connectRedis({ RESP: 2 });
    try {
      const store = redisStore({ client: resp2, prefix });
      const r = record();
      await store.insertOrGet(r);
      await resp2.scriptFlush();
      expect(await store.get(r)).toEqual(r);
      expect((await store.insertOrGet(r)).record).toEqual(r);
      // The same through ioredis, the driver of `{ url }`.
      const viaIo = redisStore({ client: io, prefix });
      await resp2.scriptFlush();
      expect(await viaIo.get(r)).toEqual(r);
      expect((await viaIo.insertOrGet(r)).record).toEqual(r);
    } finally {
      await resp2.close();
    }
  });

  it('never closes a client it was given', async () => {
    const store = redisStore({ client: redis, prefix });
    await store.get(record());
    await store.close();
    expect(redis.isOpen).toBe(true);
    expect(await redis.ping()).toBe('PONG');
    await expect(store.get(record())).rejects.toMatchObject({ code: 'CLOSED' });
  });

  it('works on an ioredis client it was given, and never closes that one either', async () => {
    const store = redisStore({ client: io, prefix });
    const r = record();
    expect(await store.insertOrGet(r)).toEqual({ inserted: true, record: r, now: expect.any(Number) });
    expect(await store.update(r, { fence: 1, states: ['in_progress'] }, { attempts: 2 })).toEqual(expect.any(Number));
    expect(await store.get(r)).toEqual({ ...r, attempts: 2 });
    await store.close();
    expect(io.status).toBe('ready');
    expect(await io.ping()).toBe('PONG');
  });

  it('refuses a client that is neither an ioredis nor a node-redis client', () => {
    expect(() => redisStore({ client: {} as never, prefix })).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    );
  });

  it('fails fast while Redis is down, then works once it is up, and after a dropped connection', async () => {
    // A port nobody listens on, later served by a proxy to the real Redis.
    const probe = net.createServer().listen(0, '127.0.0.1');
    await once(probe, 'listening');
    const port = (probe.address() as net.AddressInfo).port;
    await new Promise((resolve) => probe.close(resolve));

    const store = redisStore({ url: `redis://127.0.0.1:${port}`, prefix });
    const r = record();
    const started = Date.now();
    const failure = await store.insertOrGet(r).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(Error);
    expect(failure).not.toBeInstanceOf(OncelyError);
    expect((failure as NodeJS.ErrnoException).code).toBe('ECONNREFUSED');
    await expect(store.get(r)).rejects.toThrow(/ECONNREFUSED/);
    expect(Date.now() - started).toBeLessThan(2_000);

    const proxy = await redisProxy(port);
    try {
      expect((await store.insertOrGet(r)).inserted).toBe(true);

      proxy.drop();
      // sleep: lets the dropped connection's close reach the client, so the get below meets a reconnect.
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(await store.get(r)).toEqual(r);
    } finally {
      await store.close();
      proxy.close();
    }

    const good = redisStore({ url: REDIS_URL, prefix });
    expect(await good.get(r)).toEqual(r);
    await good.close();
  });
});

describe('redis store batches', () => {
  // Records the script runs the store sends, so a test can tell that concurrent calls shared one.
  // An EVALSHA refused with NOSCRIPT (an earlier test flushed the scripts) did not run: not counted.
  // On node-redis by default; on ioredis (the driver of `{ url }`) where the driver matters.
  function counting(driver: 'node-redis' | 'ioredis' = 'node-redis') {
    const sent: string[][] = [];
    const record = async (args: string[], send: () => Promise<unknown>) => {
      try {
        const reply = await send();
        sent.push(args);
        return reply;
      } catch (error) {
        if (!String(error).includes('NOSCRIPT')) sent.push(args);
        throw error;
      }
    };
    const client =
      driver === 'ioredis'
        ? { call: (command: string, args: string[]) => record([command, ...args], () => io.call(command, args)) }
        : { sendCommand: (args: string[]) => record(args, () => redis.sendCommand(args)) };
    return { client, sent };
  }

  it('sends a lone call at once, and concurrent calls as full script runs of MAX_BATCH records', async () => {
    const { client, sent } = counting();
    const store = redisStore({ client, prefix });
    const lone = record();
    expect((await store.insertOrGet(lone)).inserted).toBe(true);
    expect(sent).toHaveLength(1);
    const many = Array.from({ length: 3 * MAX_BATCH + 2 }, () => record());
    await Promise.all(many.map((r) => store.insertOrGet(r)));
    // KEYS of a run: the two index keys, then one per record.
    expect(sent.slice(1).map((args) => Number(args[2]) - INDEX_KEYS)).toEqual([MAX_BATCH, MAX_BATCH, MAX_BATCH, 2]);
  });

  it('sends every run of a burst before the first one answers, so Redis can work while Node does', async () => {
    let inFlight = 0;
    let most = 0;
    const client = {
      async call(command: string, args: string[]) {
        most = Math.max(most, ++inFlight);
        try {
          return await io.call(command, args);
        } finally {
          inFlight--;
        }
      },
    };
    const store = redisStore({ client, prefix });
    await Promise.all(Array.from({ length: 4 * MAX_BATCH }, () => store.insertOrGet(record())));
    expect(most).toBe(4);
  });

  it('lets the first of 200 concurrent inserts of one id win and shows it to the other 199', async () => {
    const { client, sent } = counting();
    const store = redisStore({ client, prefix });
    const base = record();
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, i) => store.insertOrGet({ ...base, fingerprint: `fp-${i}` })),
    );
    // In runs of MAX_BATCH, sent in order on one connection: Redis runs them in that order, and
    // each script its keys in order, so the first inserts.
    expect(sent).toHaveLength(Math.ceil(200 / MAX_BATCH));
    expect(results.filter((r) => r.inserted)).toHaveLength(1);
    expect(results[0]).toEqual({ inserted: true, record: { ...base, fingerprint: 'fp-0' }, now: expect.any(Number) });
    for (const r of results.slice(1))
      expect(r).toEqual({ inserted: false, record: { ...base, fingerprint: 'fp-0' }, now: expect.any(Number) });
  });

  it('inserts 500 concurrent unique records, each answered with its own', async () => {
    const store = redisStore({ client: redis, prefix });
    const records = Array.from({ length: 500 }, (_, i) =>
      record({ result: i % 2 ? `{"v":${i}}` : null, completedAt: i % 3 ? null : 1_000 + i }),
    );
    const results = await Promise.all(records.map((r) => store.insertOrGet(r)));
    for (const [i, r] of results.entries())
      expect(r).toEqual({ inserted: true, record: records[i], now: expect.any(Number) });
    const read = await Promise.all(records.map((r) => store.get(r)));
    expect(read).toEqual(records);
  });

  it('answers each update of one batch by its own check, applying writes to one id in order', async () => {
    const store = redisStore({ client: redis, prefix });
    const [a, b, c] = [record({ fence: 1 }), record({ fence: 4 }), record({ fence: 1, leaseUntil: 500 })];
    await Promise.all([a, b, c].map((r) => store.insertOrGet(r)));
    const { client, sent } = counting();
    const batched = redisStore({ client, prefix });
    const done = { state: 'succeeded' as const, result: '{"v":2}', leaseUntil: null, completedAt: 9 };
    const answers = await Promise.all([
      batched.update(a, { fence: 1, states: ['in_progress'] }, { fence: 2 }),
      batched.update(b, { fence: 3, states: ['in_progress'] }, done),
      // Sees a's fence already raised to 2 by the first write, as a later separate call would.
      batched.update(a, { fence: 1, states: ['in_progress'] }, done),
      batched.update(a, { fence: 2, states: ['in_progress'] }, done),
      batched.update(c, { fence: 1, states: ['in_progress'], leaseUntil: 499 }, done),
      batched.update(c, { fence: 1, states: ['in_progress'], leaseUntil: 500 }, { attempts: 7, leaseUntil: 600 }),
      batched.update({ ...a, key: 'absent' }, { fence: 1, states: ['in_progress'] }, done),
    ]);
    expect(sent).toHaveLength(1);
    // One script run, one TIME: every write that applied answers the same now.
    const now = answers[0];
    expect(now).toEqual(expect.any(Number));
    expect(answers).toEqual([now, null, null, now, null, now, null]);
    expect(await store.get(a)).toEqual({ ...a, ...done, fence: 2 });
    expect(await store.get(b)).toEqual(b);
    expect(await store.get(c)).toEqual({ ...c, attempts: 7, leaseUntil: 600 });
  });

  it.each([
    ['a string not in its layout', 'not a record', /is not an oncely record/, 'node-redis'],
    ['a value of another type', ['field', 'value'], /WRONGTYPE/, 'node-redis'],
    ['a string not in its layout', 'not a record', /is not an oncely record/, 'ioredis'],
    ['a value of another type', ['field', 'value'], /WRONGTYPE/, 'ioredis'],
  ] as const)(
    'fails only the caller whose key holds %s; the rest of its batch succeeds (%s)',
    async (_, value, message, driver) => {
      const { client, sent } = counting(driver);
      const store = redisStore({ client, prefix });
      const [g1, g2, g3, bad] = [record(), record(), record(), record()];
      const badKey = recordKey(prefix, bad);
      if (typeof value === 'string') await redis.set(badKey, value);
      else await redis.hSet(badKey, value[0] as string, value[1] as string);
      const outcome = (s: PromiseSettledResult<unknown>) => (s.status === 'fulfilled' ? s.value : String(s.reason));
      const wrongType = expect.stringMatching(message);
      const inserts = await Promise.allSettled([g1, bad, g2, g3].map((r) => store.insertOrGet(r)));
      expect(inserts.map(outcome)).toEqual([
        { inserted: true, record: g1, now: expect.any(Number) },
        wrongType,
        { inserted: true, record: g2, now: expect.any(Number) },
        { inserted: true, record: g3, now: expect.any(Number) },
      ]);
      const held = { fence: 1, states: ['in_progress' as const] };
      const updates = await Promise.allSettled([g1, bad, g2].map((r) => store.update(r, held, { attempts: 2 })));
      expect(updates.map(outcome)).toEqual([expect.any(Number), wrongType, expect.any(Number)]);
      expect((await Promise.allSettled([bad, g3].map((r) => store.get(r)))).map(outcome)).toEqual([wrongType, g3]);
      // Each kind went out as one script run: nothing was retried one by one.
      expect(sent).toHaveLength(3);
      // The foreign value is left as it was.
      if (typeof value === 'string') expect(await redis.get(badKey)).toBe(value);
      else expect(await redis.hGetAll(badKey)).toEqual({ [value[0] as string]: value[1] });
    },
  );

  it('fails a call Redis does not answer within its timeout, connecting included, then connects afresh', async () => {
    const proxy = await redisProxy();
    const store = redisStore({ url: `redis://127.0.0.1:${proxy.port}`, prefix, timeout: 300 });
    try {
      const r = record();
      expect((await store.insertOrGet(r)).inserted).toBe(true);
      proxy.pause(true);
      for (const call of [() => store.get(r), () => Promise.all([store.get(r), store.get(record())])]) {
        // The second call connects anew, to a server that accepts but never answers: bounded too.
        const started = Date.now();
        await expect(call()).rejects.toThrow(/redis did not answer within 300 ms/);
        expect(Date.now() - started).toBeLessThan(2_000);
      }
      proxy.pause(false);
      expect(await store.get(r)).toEqual(r);
    } finally {
      await store.close();
      proxy.close();
    }
  });
});
