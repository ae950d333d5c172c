import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createOncely,
  fingerprint,
  keyFrom,
  type Oncely,
  OncelyError,
  type RecordStore,
  type StoredRecord,
  type WriteOptions,
} from '../../src/index.js';

// sleep: the helper for the waits below whose duration is the point (leases, TTLs, a slow answer).
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const RELATIVE: WriteOptions = { relative: true };

/**
 * `store` answering every update 5 ms after it applied, as over a slow network: a caller that
 * estimated the store's clock from its own when the answer came, instead of taking the time the
 * store applied at, would be off by that much. Closing it leaves `store` open.
 */
function slowToAnswer(store: RecordStore): RecordStore {
  return {
    kind: store.kind,
    insertOrGet: (...args) => store.insertOrGet(...args),
    update: async (...args) => {
      const applied = await store.update(...args);
      // sleep: the 5 ms late answer is what this wrapper is for.
      await sleep(5);
      return applied;
    },
    get: (...args) => store.get(...args),
    list: (...args) => store.list(...args),
    purgeExpired: (...args) => store.purgeExpired(...args),
    close: async () => {},
  };
}

/** A unique action name, so tests sharing one store never see each other's keys. */
const action = (name: string) => `${name}-${randomUUID().slice(0, 8)}`;

async function rejection(promise: Promise<unknown>): Promise<OncelyError> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(OncelyError);
    return error as OncelyError;
  }
  throw new Error('expected a rejection');
}

/** A claim whose holder vanished: written straight to the store with a lease already over. */
function abandoned(tenant: string, act: string, key: string, fingerprint: string): StoredRecord {
  const now = Date.now();
  return {
    tenant,
    action: act,
    key,
    state: 'in_progress',
    fingerprint,
    fence: 1,
    attempts: 1,
    leaseUntil: now - 1,
    result: null,
    traceId: randomUUID(),
    createdAt: now - 1000,
    updatedAt: now - 1000,
    completedAt: null,
    expiresAt: now + 60_000,
  };
}

/** The semantics of the engine, run against one store. */
export function describeConformance(name: string, makeStore: () => RecordStore | Promise<RecordStore>): void {
  describe(`conformance: ${name}`, () => {
    let store: RecordStore;
    let once: Oncely;

    beforeAll(async () => {
      store = await makeStore();
      once = await createOncely({ store, tenant: 'acme', defaults: { ttl: '1h', lease: '5s' } });
    });
    afterAll(async () => {
      await once.close();
    });

    it('executes the first call and replays every later one without executing', async () => {
      const act = action('charge');
      let runs = 0;
      const input = { orderId: 'ORD-10086', amount: 4200 };
      const fn = async () => {
        runs++;
        return { chargeId: 'ch_1', amount: 4200 };
      };
      const first = await once.run({ action: act, key: keyFrom('ORD-10086', 'charge'), input }, fn);
      expect(first).toMatchObject({ replayed: false, value: { chargeId: 'ch_1', amount: 4200 } });
      expect(first.record).toMatchObject({
        state: 'succeeded',
        attempts: 1,
        tenant: 'acme',
        action: act,
        key: 'ORD-10086:charge',
      });
      expect(first.record.fingerprint).toMatch(/^[0-9a-f]{64}$/);
      expect(first.record.completedAt).toBeGreaterThanOrEqual(first.record.createdAt);
      expect(first.record.expiresAt).toBeGreaterThan(Date.now() + 59 * 60_000);
      // Same input with keys in another order is the same fingerprint.
      const second = await once.run(
        { action: act, key: 'ORD-10086:charge', input: { amount: 4200, orderId: 'ORD-10086' } },
        fn,
      );
      expect(second).toMatchObject({ replayed: true, value: { chargeId: 'ch_1', amount: 4200 } });
      expect(second.record.fingerprint).toBe(first.record.fingerprint);
      expect(runs).toBe(1);
    });

    it('replays undefined, null and nested values exactly as stored', async () => {
      const act = action('values');
      for (const [i, value] of [undefined, null, 0, '', [1, { a: [true] }]].entries()) {
        const first = await once.run({ action: act, key: `k${i}` }, async () => value);
        const again = await once.run({ action: act, key: `k${i}` }, async () => 'never');
        expect(first.value).toEqual(value);
        expect(again).toMatchObject({ replayed: true });
        expect(again.value).toEqual(value);
      }
    });

    it('refuses the same key with another input: KEY_REUSED with the existing state', async () => {
      const act = action('refund');
      await once.run({ action: act, key: 'R-1', input: { amount: 1 } }, async () => 'ok');
      let runs = 0;
      const error = await rejection(once.run({ action: act, key: 'R-1', input: { amount: 2 } }, async () => runs++));
      expect(error.code).toBe('KEY_REUSED');
      expect(error.record?.state).toBe('succeeded');
      expect(runs).toBe(0);
    });

    it('answers a duplicate while the first runs with IN_PROGRESS and a retry hint, or waits for the outcome', async () => {
      const act = action('sms');
      let release!: () => void;
      const gate = new Promise<void>((r) => {
        release = r;
      });
      let runs = 0;
      let started!: () => void;
      const running = new Promise<void>((r) => {
        started = r;
      });
      const first = once.run({ action: act, key: 'S-1' }, async () => {
        runs++;
        started();
        await gate;
        return 'sent';
      });
      // The duplicate comes once the first holds the claim (its function runs), however slow the store.
      await running;
      const busy = await rejection(once.run({ action: act, key: 'S-1' }, async () => runs++));
      expect(busy.code).toBe('IN_PROGRESS');
      expect(busy.retryAfterMs).toBeGreaterThan(0);
      expect(busy.record?.state).toBe('in_progress');
      const waiting = once.run({ action: act, key: 'S-1', wait: '5s' }, async () => runs++);
      // sleep: a head start for the waiter to find the claim in progress; were it late it would replay all the same.
      await sleep(50);
      release();
      expect((await first).value).toBe('sent');
      expect(await waiting).toMatchObject({ replayed: true, value: 'sent' });
      expect(runs).toBe(1);
    });

    it('gives up waiting with IN_PROGRESS when the wait runs out', async () => {
      const act = action('slow');
      let release!: () => void;
      let holding!: () => void;
      const held = new Promise<void>((r) => {
        holding = r;
      });
      const first = once.run({ action: act, key: 'W-1' }, () => {
        holding();
        return new Promise<string>((r) => (release = () => r('done')));
      });
      await held;
      const started = Date.now();
      const error = await rejection(once.run({ action: act, key: 'W-1', wait: 150 }, async () => 'no'));
      expect(error.code).toBe('IN_PROGRESS');
      expect(Date.now() - started).toBeGreaterThanOrEqual(140);
      release();
      await first;
    });

    it('releases the key when the function throws, so the next call executes again with more attempts', async () => {
      const act = action('push');
      const traces: string[] = [];
      const error = await once
        .run({ action: act, key: 'P-1' }, async (ctx) => {
          traces.push(ctx.traceId);
          throw new Error('gateway timeout');
        })
        .catch((e) => e);
      expect(error.message).toBe('gateway timeout');
      expect((await once.get(act, 'P-1'))?.state).toBe('released');
      const second = await once.run({ action: act, key: 'P-1' }, async (ctx) => {
        traces.push(ctx.traceId);
        return ctx.attempt;
      });
      expect(second).toMatchObject({ replayed: false, value: 2 });
      expect(second.record.attempts).toBe(2);
      expect(traces[0]).toBe(traces[1]);
    });

    it("stores failures with onError: 'store' and replays them with the original name, message and code", async () => {
      const act = action('ledger');
      class DeclinedError extends Error {
        code = 'CARD_DECLINED';
        override name = 'DeclinedError';
      }
      const first = await once
        .run({ action: act, key: 'L-1', onError: 'store' }, async () => {
          throw new DeclinedError('card declined');
        })
        .catch((e) => e);
      expect(first).toBeInstanceOf(DeclinedError);
      let runs = 0;
      const replay = await rejection(once.run({ action: act, key: 'L-1', onError: 'store' }, async () => runs++));
      expect(replay).toMatchObject({
        name: 'DeclinedError',
        message: 'card declined',
        code: 'CARD_DECLINED',
        replayed: true,
      });
      expect(replay.record?.state).toBe('failed');
      expect(runs).toBe(0);
    });

    it('stores only the failures a predicate picks', async () => {
      const act = action('pick');
      const onError = (e: unknown) => (e as Error).message.startsWith('final');
      await once
        .run({ action: act, key: 'a', onError }, async () => Promise.reject(new Error('transient')))
        .catch(() => {});
      await once
        .run({ action: act, key: 'b', onError }, async () => Promise.reject(new Error('final: no')))
        .catch(() => {});
      expect((await once.get(act, 'a'))?.state).toBe('released');
      expect((await once.get(act, 'b'))?.state).toBe('failed');
    });

    it("lets the next caller take over an expired lease under 'retry', and refuses the old holder's completion", async () => {
      const act = action('takeover');
      const stale = abandoned('acme', act, 'T-1', 'will-be-replaced');
      await store.insertOrGet(stale);
      // An expired claim with another fingerprint is still a different input: KEY_REUSED guards it.
      expect((await rejection(once.run({ action: act, key: 'T-1' }, async () => 'x'))).code).toBe('KEY_REUSED');
      const current = abandoned('acme', `${act}-b`, 'T-1', fingerprint({ n: 1 }));
      await store.insertOrGet(current);
      const taken = await once.run({ action: `${act}-b`, key: 'T-1', input: { n: 1 } }, async (ctx) => ({
        fence: ctx.fence,
        attempt: ctx.attempt,
        trace: ctx.traceId,
      }));
      expect(taken.value).toEqual({ fence: 2, attempt: 2, trace: current.traceId });
      // The vanished holder (fence 1) comes back and tries to complete: refused.
      const late = await store.update(current, { fence: 1, states: ['in_progress', 'unknown'] }, { state: 'failed' });
      expect(late).toBeNull();
      expect((await once.get(`${act}-b`, 'T-1'))?.state).toBe('succeeded');
    });

    it('fails a holder whose claim was taken over with LEASE_LOST and aborts its signal', async () => {
      const act = action('lost');
      let aborted: unknown;
      const run = once.run({ action: act, key: 'X-1', lease: 60 }, async (ctx) => {
        const record = (await store.get({ tenant: 'acme', action: act, key: 'X-1' })) as StoredRecord;
        // Another instance takes the key over (as after a long pause of this one).
        await store.update(record, { fence: record.fence, states: ['in_progress'] }, { fence: record.fence + 1 });
        await new Promise<void>((r) => ctx.signal.addEventListener('abort', () => r(), { once: true }));
        aborted = ctx.signal.reason;
        return 'late';
      });
      const error = await rejection(run);
      expect(error.code).toBe('LEASE_LOST');
      expect((aborted as OncelyError).code).toBe('LEASE_LOST');
      expect((await once.get(act, 'X-1'))?.state).toBe('in_progress');
    });

    it('renews the lease of a long-running function so a short lease is safe', async () => {
      const act = action('renew');
      let runs = 0;
      // Five leases long, renewed every third of one: a renewal may come up to 130 ms late (a
      // loaded CI machine) before another caller could take over.
      const first = once.run({ action: act, key: 'N-1', lease: 200 }, async () => {
        runs++;
        // sleep: five leases long: the renewals are what keeps the claim.
        await sleep(1_000);
        return 'done';
      });
      // sleep: three leases into the function, when an unrenewed claim would have been taken over.
      await sleep(600);
      const busy = await rejection(once.run({ action: act, key: 'N-1', lease: 200 }, async () => runs++));
      expect(busy.code).toBe('IN_PROGRESS');
      expect((await first).value).toBe('done');
      expect(runs).toBe(1);
    });

    it('renews a short lease on time while a long-leased function runs beside it', async () => {
      const act = action('renew-mixed');
      let release: () => void = () => {};
      const long = once.run(
        { action: act, key: 'L-1', lease: '30s' },
        () =>
          new Promise<string>((r) => {
            release = () => r('long');
          }),
      );
      let runs = 0;
      const short = once.run({ action: act, key: 'S-1', lease: 200 }, async () => {
        runs++;
        // sleep: five leases long: the renewals are what keeps the claim.
        await sleep(1_000);
        return 'short';
      });
      // sleep: three leases into the function, when an unrenewed claim would have been taken over.
      await sleep(600);
      const busy = await rejection(once.run({ action: act, key: 'S-1', lease: 200 }, async () => runs++));
      expect(busy.code).toBe('IN_PROGRESS');
      expect((await short).value).toBe('short');
      release();
      expect((await long).value).toBe('long');
      expect(runs).toBe(1);
    });

    it("turns an expired lease unknown under 'hold' until it is resolved", async () => {
      const act = action('money');
      const print = fingerprint({ amount: 5 });
      const hold = { action: act, input: { amount: 5 }, onLeaseExpired: 'hold' as const };
      let runs = 0;
      const fn = async () => ++runs;
      for (const key of ['H-value', 'H-error', 'H-retry']) {
        await store.insertOrGet(abandoned('acme', act, key, print));
        const unknown = await rejection(once.run({ ...hold, key }, fn));
        expect(unknown.code).toBe('OUTCOME_UNKNOWN');
        expect(unknown.record?.state).toBe('unknown');
        expect((await rejection(once.run({ ...hold, key }, fn))).code).toBe('OUTCOME_UNKNOWN');
      }
      expect(runs).toBe(0);
      await expect(once.resolve(act, 'missing', 'retry')).rejects.toMatchObject({ code: 'NOT_FOUND' });
      expect((await once.resolve(act, 'H-value', { value: { charged: true } })).state).toBe('succeeded');
      expect(await once.run({ ...hold, key: 'H-value' }, fn)).toMatchObject({
        replayed: true,
        value: { charged: true },
      });
      await once.resolve(act, 'H-error', { error: { message: 'refunded by hand', code: 'MANUAL' } });
      expect(await rejection(once.run({ ...hold, key: 'H-error' }, fn))).toMatchObject({
        code: 'MANUAL',
        replayed: true,
      });
      await once.resolve(act, 'H-retry', 'retry');
      expect(await once.run({ ...hold, key: 'H-retry' }, fn)).toMatchObject({ replayed: false, value: 1 });
      await expect(once.resolve(act, 'H-retry', 'retry')).rejects.toMatchObject({ code: 'NOT_RESOLVABLE' });
    });

    it("keeps a claim under 'hold' from expiring while it is in progress, then applies the TTL", async () => {
      const act = action('held');
      const r = await once.run({ action: act, key: 'Q-1', onLeaseExpired: 'hold', ttl: '1m' }, async () =>
        once.get(act, 'Q-1'),
      );
      expect(r.value).toMatchObject({ state: 'in_progress', expiresAt: null });
      expect(r.record.expiresAt).toBeGreaterThan(Date.now());
    });

    it('treats an expired key as new, keeps permanent ones, and purges expired records', async () => {
      const act = action('ttl');
      let runs = 0;
      const fn = async () => ++runs;
      await once.run({ action: act, key: 'E-1', ttl: 100 }, fn);
      const forever = await once.run({ action: act, key: 'E-2', ttl: 'permanent' }, fn);
      expect(forever.record.expiresAt).toBeNull();
      // sleep: E-1's 100 ms TTL must run out.
      await sleep(150);
      const again = await once.run({ action: act, key: 'E-1', ttl: 100 }, fn);
      expect(again).toMatchObject({ replayed: false, value: 3 });
      expect(again.record.attempts).toBe(1);
      await once.run({ action: act, key: 'E-3', ttl: 50 }, fn);
      // sleep: E-3's 50 ms TTL must run out.
      await sleep(100);
      await once.purgeExpired({ batchSize: 2 });
      expect(await once.get(act, 'E-3')).toBeNull();
      expect(await once.get(act, 'E-2')).not.toBeNull();
      expect(await once.run({ action: act, key: 'E-2', ttl: 'permanent' }, fn)).toMatchObject({
        replayed: true,
        value: 2,
      });
    });

    it('isolates tenants: the same key in two tenants is two records, and neither reads the other', async () => {
      const act = action('tenant');
      const a = await once.run({ action: act, key: 'K', tenant: 'tenant-a' }, async () => 'a');
      const b = await once.run({ action: act, key: 'K', tenant: 'tenant-b' }, async () => 'b');
      expect([a.value, b.value, a.replayed, b.replayed]).toEqual(['a', 'b', false, false]);
      expect((await once.get(act, 'K', { tenant: 'tenant-a' }))?.tenant).toBe('tenant-a');
      expect(await once.get(act, 'K')).toBeNull();
      expect((await once.run({ action: act, key: 'K', tenant: 'tenant-b' }, async () => 'x')).value).toBe('b');
    });

    it('validates keys before touching the store', async () => {
      const act = action('keys');
      let runs = 0;
      const fn = async () => runs++;
      expect((await rejection(once.run({ action: act, key: '' }, fn))).code).toBe('KEY_REQUIRED');
      expect((await rejection(once.run({ action: act, key: undefined as unknown as string }, fn))).code).toBe(
        'KEY_REQUIRED',
      );
      expect((await rejection(once.run({ action: act, key: 'x'.repeat(256) }, fn))).code).toBe('KEY_INVALID');
      expect((await rejection(once.run({ action: act, key: 'a\nb' }, fn))).code).toBe('KEY_INVALID');
      expect((await once.run({ action: act, key: 'x'.repeat(255) }, fn)).replayed).toBe(false);
      expect(runs).toBe(1);
    });

    it('gives the function a context with stable ids across retries', async () => {
      const act = action('ctx');
      const seen: { id: string; req: string; sub: string; key: string; tenant: string }[] = [];
      const fn = async (ctx: import('../../src/index.js').RunContext) => {
        seen.push({
          id: ctx.stableId('sms'),
          req: ctx.requestId,
          sub: ctx.subKey(2),
          key: ctx.idempotencyKey,
          tenant: ctx.tenant,
        });
        if (seen.length === 1) throw new Error('retry me');
        return 'ok';
      };
      await once.run({ action: act, key: 'C-1' }, fn).catch(() => {});
      await once.run({ action: act, key: 'C-1' }, fn);
      const [a, b] = seen;
      expect(a?.id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      expect(a?.id).toBe(b?.id);
      expect(a?.req).not.toBe(b?.req);
      expect(a).toMatchObject({ sub: 'C-1:2', key: 'C-1', tenant: 'acme' });
    });

    it('wraps a function so each input is run once under the key built from it', async () => {
      let runs = 0;
      const charge = once.wrap(
        { action: action('wrap'), key: (i: { orderId: string }) => [i.orderId, 'charge'], ttl: 'permanent' },
        async (input, ctx) => ({ order: input.orderId, key: ctx.idempotencyKey, n: ++runs }),
      );
      const first = await charge({ orderId: 'ORD:1' });
      const again = await charge({ orderId: 'ORD:1' });
      expect(first).toMatchObject({ replayed: false, value: { order: 'ORD:1', key: 'ORD\\:1:charge', n: 1 } });
      expect(again).toMatchObject({ replayed: true, value: first.value });
      expect(again.record.expiresAt).toBeNull();
    });

    it('stores an oversized result as a RESULT_TOO_LARGE failure so the effect is not repeated', async () => {
      const act = action('big');
      let runs = 0;
      const fn = async () => {
        runs++;
        return 'x'.repeat(2000);
      };
      expect((await rejection(once.run({ action: act, key: 'B', maxResultBytes: 1000 }, fn))).code).toBe(
        'RESULT_TOO_LARGE',
      );
      expect(await rejection(once.run({ action: act, key: 'B', maxResultBytes: 1000 }, fn))).toMatchObject({
        code: 'RESULT_TOO_LARGE',
        replayed: true,
      });
      expect(runs).toBe(1);
    });

    it('defect 11.7: a result that is not JSON (a bigint, a cycle) is stored as RESULT_NOT_SERIALIZABLE, not left in progress', async () => {
      const act = action('bigint');
      const cyclic: Record<string, unknown> = {};
      cyclic.self = cyclic;
      for (const [key, result] of [
        ['N-1', { id: 10n }],
        ['N-2', cyclic],
      ] as const) {
        let runs = 0;
        // A short lease: on the old code the claim stayed in progress and the next call after it ran again.
        const fn = async () => {
          runs++;
          return result;
        };
        const first = await rejection(once.run({ action: act, key, lease: 50 }, fn));
        expect(first).toMatchObject({ code: 'RESULT_NOT_SERIALIZABLE', replayed: false });
        expect((await once.get(act, key))?.state).toBe('failed');
        // sleep: the 50 ms lease must run out: the stored failure must still replay after it.
        await sleep(80);
        expect(await rejection(once.run({ action: act, key, lease: 50 }, fn))).toMatchObject({
          code: 'RESULT_NOT_SERIALIZABLE',
          replayed: true,
        });
        expect(runs).toBe(1);
      }
    });

    it("answers an update with the store's clock it applied at, from which a relative write's times count", async () => {
      const id = { tenant: 'acme', action: action('applied'), key: 'A-1' };
      const claim: StoredRecord = {
        ...id,
        state: 'in_progress',
        fingerprint: 'fp-applied',
        fence: 1,
        attempts: 1,
        leaseUntil: 5_000,
        result: null,
        traceId: randomUUID(),
        createdAt: 0,
        updatedAt: 0,
        completedAt: null,
        expiresAt: 60_000,
      };
      const { record: claimed } = await store.insertOrGet(claim, undefined, RELATIVE);
      const held = { fence: claimed.fence, states: ['in_progress' as const] };
      const stale = { fence: claimed.fence - 1, states: held.states };
      expect(await store.update(id, stale, { leaseUntil: 5_000, updatedAt: 0 }, undefined, RELATIVE)).toBeNull();
      const renewed = await store.update(id, held, { leaseUntil: 5_000, updatedAt: 0 }, undefined, RELATIVE);
      expect(renewed).toEqual(expect.any(Number));
      expect(await store.get(id)).toEqual({ ...claimed, leaseUntil: Number(renewed) + 5_000, updatedAt: renewed });
      const outcome = { state: 'succeeded' as const, result: '1', leaseUntil: null, completedAt: 0, updatedAt: 0 };
      const done = Number(await store.update(id, held, { ...outcome, expiresAt: 60_000 }, undefined, RELATIVE));
      expect(await store.get(id)).toEqual({
        ...claimed,
        ...outcome,
        completedAt: done,
        updatedAt: done,
        expiresAt: done + 60_000,
      });
      expect(done).toBeGreaterThanOrEqual(Number(renewed));
      // The store's clock, which on this one test host reads about as ours does.
      expect(Math.abs(done - Date.now())).toBeLessThan(5_000);

      // Concurrent writes (batched together by the stores that batch) each answer their own time.
      const ids = Array.from({ length: 20 }, (_, i) => ({ ...id, key: `B-${i}` }));
      const claims = await Promise.all(ids.map((k) => store.insertOrGet({ ...claim, ...k }, undefined, RELATIVE)));
      const answers = await Promise.all(
        claims.map(({ record }) =>
          store.update(record, { fence: record.fence, states: held.states }, outcome, undefined, RELATIVE),
        ),
      );
      const stored = await Promise.all(ids.map((k) => store.get(k)));
      expect(stored.map((r) => [r?.updatedAt, r?.completedAt])).toEqual(answers.map((at) => [at, at]));
      expect(answers.every((at) => typeof at === 'number')).toBe(true);
    });

    it('the record a first caller gets equals the one its replay gets, field for field', async () => {
      // Through a store slow to answer, so a record built from anything but the time the store
      // applied at differs by milliseconds; and with a replay cache, which keeps that record.
      const slow = slowToAnswer(store);
      const defaults = { ttl: '1h', lease: '5s' } as const;
      const cached = await createOncely({ store: slow, tenant: 'acme', defaults, replayCache: 100 });
      const act = action('same-record');
      const stored = async (key: string) => once.get(act, key);

      // A first execution, replayed from the cache, from another instance, and read.
      const first = await cached.run({ action: act, key: 'F-1', input: { n: 1 } }, async () => 'v');
      expect(first.replayed).toBe(false);
      expect((await cached.run({ action: act, key: 'F-1', input: { n: 1 } }, async () => 'x')).record).toEqual(
        first.record,
      );
      expect((await once.run({ action: act, key: 'F-1', input: { n: 1 } }, async () => 'x')).record).toEqual(
        first.record,
      );
      expect(await stored('F-1')).toEqual(first.record);

      // A function that outlives a few lease renewals.
      // sleep: the function outlives a few 60 ms lease renewals.
      const renewed = await cached.run({ action: act, key: 'F-2', lease: 60 }, async () => sleep(150));
      expect((await once.run({ action: act, key: 'F-2', lease: 60 }, async () => 'x')).record).toEqual(renewed.record);

      // A takeover of a vanished holder's claim, and a key whose record expired, claimed anew.
      await store.insertOrGet(abandoned('acme', act, 'F-3', fingerprint(null)));
      const taken = await cached.run({ action: act, key: 'F-3' }, async () => 'taken');
      expect(taken.record.attempts).toBe(2);
      expect(await stored('F-3')).toEqual(taken.record);
      await cached.run({ action: act, key: 'F-4', ttl: 50 }, async () => 'old');
      // sleep: F-4's 50 ms TTL must run out.
      await sleep(80);
      const fresh = await cached.run({ action: act, key: 'F-4', ttl: 50 }, async () => 'new');
      expect(fresh).toMatchObject({ replayed: false, value: 'new' });
      expect(await stored('F-4')).toEqual(fresh.record);

      // A claim turned unknown under 'hold', and its resolution.
      await store.insertOrGet(abandoned('acme', act, 'F-5', fingerprint(null)));
      const unknown = await rejection(cached.run({ action: act, key: 'F-5', onLeaseExpired: 'hold' }, async () => 1));
      expect(unknown.code).toBe('OUTCOME_UNKNOWN');
      expect(await stored('F-5')).toEqual(unknown.record);
      const resolved = await cached.resolve(act, 'F-5', { value: 'by hand' });
      expect(await stored('F-5')).toEqual(resolved);
      await cached.close();
    });

    it('runs a burst of concurrent duplicates once', async () => {
      const act = action('burst');
      let runs = 0;
      const results = await Promise.allSettled(
        Array.from({ length: 50 }, () =>
          once.run({ action: act, key: 'B-1', wait: '5s' }, async () => {
            runs++;
            // sleep: the function runs a while, so the duplicates meet it in progress.
            await sleep(20);
            return 'one';
          }),
        ),
      );
      expect(runs).toBe(1);
      expect(results.every((r) => r.status === 'fulfilled' && r.value.value === 'one')).toBe(true);
      expect(results.filter((r) => r.status === 'fulfilled' && !r.value.replayed)).toHaveLength(1);
    });
  });
}
