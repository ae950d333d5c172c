/**
 * Issue 15, reconciliation in one process on each store (SQLite, PostgreSQL, Redis): every answer
 * of a reconcile function and what it does to the record, the counts and the gauge, records left
 * for a person, a record that changed meanwhile, a live holder never asked about, paging and the
 * limit, filters, and how functions are registered. Records are planted through the store as a
 * crash leaves them; the crashes themselves are in reconcile-processes.test.ts.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { fingerprint } from '../../src/core/fingerprint.js';
import { Metrics } from '../../src/core/metrics.js';
import type { StoredRecord } from '../../src/core/record.js';
import type { Reconcile } from '../../src/engine/reconcile.js';
import { createOncely, type Oncely, type RecordStore } from '../../src/index.js';
import { storeTargets } from '../support/store-targets.js';
import { openStore, type StoreSpec } from '../support/stores.js';
import { capture } from './support/observe.js';

const MINUTE = 60_000;

/** A record as a dead holder leaves it: `unknown`, or `in_progress` with its lease over (or live). */
function planted(
  action: string,
  key: string,
  state: 'unknown' | 'in_progress',
  options: { tenant?: string; ageMs?: number; leaseLeftMs?: number } = {},
): StoredRecord {
  const now = Date.now();
  const updatedAt = now - (options.ageMs ?? 10 * MINUTE);
  return {
    tenant: options.tenant ?? 'acme',
    action,
    key,
    state,
    // The fingerprint of a call with no input, as the tests' calls make.
    fingerprint: fingerprint(undefined),
    fence: 3,
    attempts: 1,
    leaseUntil: state === 'in_progress' ? now + (options.leaseLeftMs ?? -MINUTE) : null,
    result: null,
    traceId: randomUUID(),
    createdAt: updatedAt,
    updatedAt,
    completedAt: null,
    expiresAt: null,
  };
}

function describeReconcile(name: string, makeSpec: () => StoreSpec, cleanup: () => Promise<void>) {
  describe(`reconcile on ${name}`, () => {
    let spec: StoreSpec;
    let store: RecordStore;
    let metrics: Metrics;
    let seen: ReturnType<typeof capture>;
    const engines: Oncely[] = [];
    // Each test its own action names: the records of one never show in another's listing.
    let tag = '';
    const act = (what: string) => `${what}-${tag}`;
    const plant = async (...args: Parameters<typeof planted>) => {
      const inserted = await store.insertOrGet(planted(...args));
      expect(inserted.inserted).toBe(true);
    };
    const engine = async (reconcile: Record<string, Reconcile> = {}) => {
      const once = await createOncely({
        store: openStore(spec),
        tenant: 'acme',
        metrics,
        logger: seen.logger,
        reconcile,
      });
      engines.push(once);
      return once;
    };
    const count = (action: string, answer: string, settler = 'reconciler') =>
      metrics.value('oncely_reconciled_total', [action, answer, settler]);
    const awaiting = (action: string, state: string) =>
      metrics.read('oncely_records_awaiting').find((s) => s.labels[0] === action && s.labels[1] === state)?.value;

    beforeAll(async () => {
      spec = makeSpec();
      store = openStore(spec);
    });
    beforeEach(() => {
      tag = randomUUID().slice(0, 8);
      metrics = new Metrics();
      seen = capture();
    });
    afterAll(async () => {
      for (const once of engines) await once.close();
      await store.close();
      await cleanup();
    });

    it("{ value } settles an unknown record as succeeded by 'reconciler'; duplicates replay the value", async () => {
      const charge = act('charge');
      await plant(charge, 'ORD-1:charge', 'unknown');
      const asked: string[] = [];
      const once = await engine({
        [charge]: (record) => {
          asked.push(record.key);
          return { value: { chargeId: 'ch_1' } };
        },
      });
      const report = await once.reconcile({ action: charge });
      expect(report).toEqual({
        settled: [{ ref: `acme/${charge}/ORD-1%3Acharge`, answer: 'value' }],
        unknown: 0,
        failed: 0,
        skipped: 0,
        awaiting: [],
      });
      expect(asked).toEqual(['ORD-1:charge']);
      const record = await once.get(charge, 'ORD-1:charge');
      expect(record).toMatchObject({ state: 'succeeded', settlement: { by: 'reconciler', answer: 'value' } });
      expect(Math.abs((record?.settlement?.at ?? 0) - Date.now())).toBeLessThan(5_000);
      let ran = 0;
      const again = await once.run({ action: charge, key: 'ORD-1:charge' }, () => ++ran);
      expect(again).toMatchObject({ replayed: true, value: { chargeId: 'ch_1' } });
      expect(ran).toBe(0);
      expect(count(charge, 'value')).toBe(1);
      expect(seen.lines.some((l) => l.message === 'oncely engine reconciled' && l.fields.key === 'ORD-1:charge')).toBe(
        true,
      );
      // Settled: a second pass finds nothing to ask.
      expect((await once.reconcile({ action: charge })).settled).toEqual([]);
      expect(asked).toHaveLength(1);
    });

    it("'retry' releases a stalled claim: the next call executes once", async () => {
      const charge = act('charge');
      await plant(charge, 'ORD-2:charge', 'in_progress');
      const once = await engine({ [charge]: () => 'retry' });
      expect((await once.reconcile({ action: charge })).settled).toEqual([
        { ref: `acme/${charge}/ORD-2%3Acharge`, answer: 'retry' },
      ]);
      expect(await once.get(charge, 'ORD-2:charge')).toMatchObject({
        state: 'released',
        settlement: { by: 'reconciler', answer: 'retry' },
      });
      let ran = 0;
      expect(await once.run({ action: charge, key: 'ORD-2:charge' }, () => ++ran)).toMatchObject({ replayed: false });
      expect(await once.run({ action: charge, key: 'ORD-2:charge' }, () => ++ran)).toMatchObject({ replayed: true });
      expect(ran).toBe(1);
      expect(count(charge, 'retry')).toBe(1);
    });

    it('{ error } stores the failure: duplicates get it with its code', async () => {
      const charge = act('charge');
      await plant(charge, 'ORD-3:charge', 'unknown');
      const once = await engine({ [charge]: () => ({ error: { code: 'CARD_DECLINED', message: 'declined' } }) });
      expect((await once.reconcile({ action: charge })).settled).toHaveLength(1);
      await expect(once.run({ action: charge, key: 'ORD-3:charge' }, () => 1)).rejects.toMatchObject({
        code: 'CARD_DECLINED',
        message: 'declined',
      });
      expect(count(charge, 'error')).toBe(1);
    });

    it("'unknown', a throw and a garbage answer leave the record as it was, counted and logged", async () => {
      const [wait, boom, junk] = [act('wait'), act('boom'), act('junk')];
      for (const action of [wait, boom, junk]) await plant(action, 'K-1', 'unknown');
      const once = await engine({
        [wait]: () => 'unknown',
        [boom]: async () => {
          throw new Error('gateway 502');
        },
        [junk]: () => ({ nope: true }) as never,
      });
      const report = await once.reconcile();
      expect(report).toMatchObject({ settled: [], unknown: 1, failed: 2, skipped: 0 });
      for (const action of [wait, boom, junk])
        expect(await once.get(action, 'K-1')).toMatchObject({ state: 'unknown', fence: 3 });
      expect(await once.get(wait, 'K-1')).not.toHaveProperty('settlement');
      expect([count(wait, 'unknown'), count(boom, 'failed'), count(junk, 'failed')]).toEqual([1, 1, 1]);
      const failures = seen.lines.filter((l) => l.message === 'oncely engine reconcile_failed');
      expect(failures.map((l) => [l.level, l.fields.action, (l.fields.error as { message: string }).message])).toEqual(
        expect.arrayContaining([
          ['error', boom, 'gateway 502'],
          ['error', junk, expect.stringContaining('must answer')],
        ]),
      );
    });

    it('records of actions with no reconcile stay for a person: in the report, in the gauge, until resolved', async () => {
      const refund = act('refund');
      await plant(refund, 'R-1', 'unknown');
      await plant(refund, 'R-2', 'unknown');
      await plant(refund, 'R-3', 'in_progress');
      // A live holder is at work, not waiting for anyone.
      await plant(refund, 'R-4', 'in_progress', { leaseLeftMs: MINUTE });
      const once = await engine();
      const report = await once.reconcile({ action: refund });
      expect(report.settled).toEqual([]);
      expect(report.awaiting).toEqual([
        { action: refund, state: 'unknown', count: 2 },
        { action: refund, state: 'in_progress', count: 1 },
      ]);
      expect([awaiting(refund, 'unknown'), awaiting(refund, 'in_progress')]).toEqual([2, 1]);
      expect(await once.get(refund, 'R-1')).toMatchObject({ state: 'unknown' });
      // A person settles two; the next pass's gauge says what is left, and the person is counted as one.
      await once.resolve(refund, 'R-1', { value: 'refunded' }, { by: 'ops@example.com' });
      await once.resolve(refund, 'R-3', 'retry');
      expect(count(refund, 'value', 'person')).toBe(1);
      expect(count(refund, 'retry', 'person')).toBe(1);
      expect(count(refund, 'value')).toBe(0);
      expect(await once.get(refund, 'R-1')).toMatchObject({ settlement: { by: 'ops@example.com', answer: 'value' } });
      expect((await once.reconcile({ action: refund })).awaiting).toEqual([
        { action: refund, state: 'unknown', count: 1 },
      ]);
      expect([awaiting(refund, 'unknown'), awaiting(refund, 'in_progress')]).toEqual([1, 0]);
    });

    it('a record that changed while its reconcile was asked is skipped, never overwritten', async () => {
      const charge = act('charge');
      await plant(charge, 'ORD-4:charge', 'unknown');
      let once: Oncely | undefined;
      once = await engine({
        [charge]: async (record) => {
          // A person settles it meanwhile (or the late holder writes its outcome).
          await once?.resolve(record.action, record.key, { value: 'by hand' }, { by: 'alice' });
          return { value: 'from the gateway' };
        },
      });
      const report = await once.reconcile({ action: charge });
      expect(report).toMatchObject({ settled: [], skipped: 1, failed: 0 });
      expect(await once.get(charge, 'ORD-4:charge')).toMatchObject({
        state: 'succeeded',
        settlement: { by: 'alice', answer: 'value' },
      });
      expect(await once.run({ action: charge, key: 'ORD-4:charge' }, () => 0)).toMatchObject({ value: 'by hand' });
      expect(count(charge, 'value')).toBe(0);
    });

    it('records younger than olderThan and live claims are not asked about', async () => {
      const charge = act('charge');
      await plant(charge, 'young', 'unknown', { ageMs: 1_000 });
      await plant(charge, 'live', 'in_progress', { leaseLeftMs: MINUTE });
      await plant(charge, 'old', 'unknown');
      const asked: string[] = [];
      const once = await engine({
        [charge]: (r) => {
          asked.push(r.key);
          return 'unknown';
        },
      });
      await once.reconcile({ action: charge });
      expect(asked).toEqual(['old']);
      await once.reconcile({ action: charge, olderThan: 0 });
      expect(asked.sort()).toEqual(['old', 'old', 'young']);
    });

    it('pages through a listing past live claims, up to limit records a pass', async () => {
      const charge = act('charge');
      for (let i = 0; i < 24; i++)
        await plant(charge, `K-${String(i).padStart(2, '0')}`, 'in_progress', {
          leaseLeftMs: i % 2 === 0 ? MINUTE : -MINUTE,
        });
      const once = await engine({ [charge]: () => ({ value: 'found' }) });
      const sizes: number[] = [];
      for (let pass = 0; pass < 3; pass++)
        sizes.push((await once.reconcile({ action: charge, limit: 5 })).settled.length);
      expect(sizes).toEqual([5, 5, 2]);
      const stalled = Array.from({ length: 12 }, (_, i) => `K-${String(i * 2 + 1).padStart(2, '0')}`);
      for (const key of stalled) expect(await once.get(charge, key)).toMatchObject({ state: 'succeeded' });
      expect(await once.get(charge, 'K-00')).toMatchObject({ state: 'in_progress' });
    });

    it('filters by tenant; by names whoever settles', async () => {
      const charge = act('charge');
      await plant(charge, 'T-1', 'unknown', { tenant: 'acme' });
      await plant(charge, 'T-1', 'unknown', { tenant: 'globex' });
      const once = await engine({ [charge]: () => ({ value: 1 }) });
      const report = await once.reconcile({ action: charge, tenant: 'globex', by: 'nightly-reconciler' });
      expect(report.settled).toEqual([{ ref: `globex/${charge}/T-1`, answer: 'value' }]);
      expect(await once.get(charge, 'T-1', { tenant: 'globex' })).toMatchObject({
        settlement: { by: 'nightly-reconciler' },
      });
      expect(await once.get(charge, 'T-1')).toMatchObject({ state: 'unknown' });
      await expect(once.reconcile({ limit: 0 })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      await expect(once.reconcile({ by: '' })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      await expect(once.reconcile({ olderThan: 'soon' as never })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    });

    it('wrap and run register their reconcile for the action, with the TTL of what it settles', async () => {
      const [wrapped, ran] = [act('wrapped'), act('ran')];
      const once = await engine();
      const charge = once.wrap(
        { action: wrapped, key: (i: { id: string }) => [i.id], ttl: '2d', reconcile: () => ({ value: 'w' }) },
        () => 'executed',
      );
      expect((await charge({ id: 'fresh' })).value).toBe('executed');
      const reconcile: Reconcile = () => 'retry';
      await once.run({ action: ran, key: 'fresh', reconcile }, () => 1);
      await once.run({ action: ran, key: 'fresh-2', reconcile }, () => 1);
      await plant(wrapped, 'W-1', 'unknown');
      await plant(ran, 'R-1', 'unknown');
      const report = await once.reconcile();
      expect(report.settled.map((s) => [s.ref.split('/')[1], s.answer]).sort()).toEqual([
        [ran, 'retry'],
        [wrapped, 'value'],
      ]);
      const settled = await once.get(wrapped, 'W-1');
      expect((settled?.expiresAt ?? 0) - Date.now()).toBeGreaterThan(2 * 86_400_000 - 60_000);
      expect(() => once.registerReconcile('bad name\n', () => 'retry')).toThrow(
        expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
      );
      expect(() => once.registerReconcile(ran, 'no' as never)).toThrow(
        expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
      );
    });
  });
}

for (const { title, spec, cleanup } of storeTargets(['sqlite', 'postgres', 'redis'], 'reconcile'))
  describeReconcile(title, spec, cleanup);
