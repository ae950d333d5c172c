/**
 * Issue 14, the engine's proof: a known mix of calls on each store (SQLite, PostgreSQL, Redis),
 * with a takeover and a 'hold' after kill -9 of a holder process, counted exactly; the rates; one
 * log line per non-trivial decision and one hook event per decision, with trace and request ids;
 * spans through OpenTelemetry's SDK, and none without a provider.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { trace } from '@opentelemetry/api';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type MetricName, Metrics, rates, rateTotals } from '../../src/core/metrics.js';
import { createOncely, type Oncely } from '../../src/index.js';
import { postgresStore } from '../../src/postgres/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { connectRedis, dropPrefix, freshPrefix, REDIS_URL } from '../support/redis.js';
import { startWorker } from '../support/spawn.js';
import { type StoreName, selectStores } from '../support/store-filter.js';
import { openStore, type StoreSpec } from '../support/stores.js';
import { capture, installTracing } from './support/observe.js';

// sleep: the helper for the waits below whose duration is the point.
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const HOLDER = fileURLToPath(new URL('./support/holder.ts', import.meta.url));
const TAKEN_OVER = fileURLToPath(new URL('./support/taken-over.ts', import.meta.url));

/** Every series of a metric as 'label label label' -> value (a histogram's: its count). */
function table(metrics: Metrics, name: MetricName): Record<string, number> {
  const out: Record<string, number> = {};
  for (const series of metrics.read(name)) if (series.value !== 0) out[series.labels.join(' ')] = series.value;
  return out;
}

/** The lease of the killed holders: short, so the mix waits little for it to run out. */
const LEASE = 600;

function describeMix(name: StoreName, makeSpec: () => StoreSpec, cleanup: () => Promise<void>) {
  describe(`engine observed on ${name}`, () => {
    let spec: StoreSpec;
    let plain: Oncely;
    let cached: Oncely;
    const metrics = new Metrics();
    const seen = capture();

    beforeAll(async () => {
      spec = makeSpec();
      const observe = { metrics, logger: seen.logger, onDecision: seen.onDecision, tracer: false as const };
      plain = await createOncely({ store: openStore(spec), tenant: 'acme', ...observe });
      cached = await createOncely({ store: openStore(spec), tenant: 'acme', replayCache: 100, ...observe });
    });
    afterAll(async () => {
      await plain.close();
      await cached.close();
      await cleanup();
    });

    it('counts a known mix exactly, with its rates, log lines, hook events and ids', async () => {
      // Two holders in their own processes, killed -9 while they hold their keys: their leases run out during the mix.
      const ship = startWorker({ store: spec, action: 'ship', key: 'ORD-7', lease: LEASE }, HOLDER);
      const hold = startWorker(
        { store: spec, action: 'hold', key: 'ORD-8', lease: LEASE, onLeaseExpired: 'hold' },
        HOLDER,
      );
      await Promise.all([ship.waitFor('claimed'), hold.waitFor('claimed')]);
      let shipRuns = 0;
      const shipIt = () => plain.run({ action: 'ship', key: 'ORD-7', lease: LEASE }, (ctx) => ++shipRuns + ctx.attempt);
      // The holder's lease runs (renewed while it lives): refused, an intercepted duplicate. Asked before the
      // kill, as a loaded machine may take longer than the lease between the kill and the next call.
      await expect(shipIt()).rejects.toMatchObject({ code: 'IN_PROGRESS' });
      ship.child.kill('SIGKILL');
      hold.child.kill('SIGKILL');
      expect((await ship.exited).signal).toBe('SIGKILL');
      expect((await hold.exited).signal).toBe('SIGKILL');
      const killed = Date.now();

      // pay: one execution, a replay from the store, one through the caching engine's store read, one from its cache.
      const pay = { action: 'pay', key: 'ORD-1', input: { amount: 5 } };
      const first = await plain.run({ ...pay, traceId: 'trace-ORD-1', requestId: 'req-1' }, () => ({ paid: 5 }));
      expect(first).toMatchObject({ replayed: false, record: { traceId: 'trace-ORD-1' } });
      for (const [engine, requestId] of [
        [plain, 'req-2'],
        [cached, 'req-3'],
        [cached, 'req-4'],
      ] as const) {
        const again = await engine.run({ ...pay, traceId: 'trace-retry', requestId }, () => ({ paid: -1 }));
        // The first claim's trace id, whatever trace id the retry carries.
        expect(again).toMatchObject({ replayed: true, value: { paid: 5 }, record: { traceId: 'trace-ORD-1' } });
      }

      // burst: a duplicate refused while the first runs, and one that waits and gets its replay.
      let open!: () => void;
      let claimed!: () => void;
      const opened = new Promise<void>((r) => {
        open = r;
      });
      const running = new Promise<void>((r) => {
        claimed = r;
      });
      const burst = { action: 'burst', key: 'ORD-2' };
      const firstBurst = plain.run(burst, async () => {
        claimed();
        await opened;
        return { n: 1 };
      });
      await running;
      await expect(plain.run(burst, () => ({ n: 2 }))).rejects.toMatchObject({ code: 'IN_PROGRESS' });
      const waiter = plain.run({ ...burst, wait: '10s' }, () => ({ n: 3 }));
      // Nothing outside the engine shows the waiter waiting; were it late it would replay all the same, so no
      // sleep: assertion rests on this duration, a head start for the waiter to find the claim in progress.
      await sleep(100);
      open();
      expect(await firstBurst).toMatchObject({ replayed: false, value: { n: 1 } });
      expect(await waiter).toMatchObject({ replayed: true, value: { n: 1 } });

      // book: the key reused with another input.
      await plain.run({ action: 'book', key: 'ORD-6', input: { seat: 1 } }, () => 'booked');
      await expect(plain.run({ action: 'book', key: 'ORD-6', input: { seat: 2 } }, () => 'x')).rejects.toMatchObject({
        code: 'KEY_REUSED',
      });

      // refund: a failure released (the default), then executed again.
      await expect(
        plain.run({ action: 'refund', key: 'ORD-3' }, () => {
          throw new Error('gateway down');
        }),
      ).rejects.toThrow('gateway down');
      expect(await plain.run({ action: 'refund', key: 'ORD-3' }, () => 'refunded')).toMatchObject({ replayed: false });

      // notify: a failure stored, then replayed.
      const declined = () => {
        throw Object.assign(new Error('declined'), { code: 'CARD_DECLINED' });
      };
      const notify = { action: 'notify', key: 'ORD-4', onError: 'store' as const };
      // The function's own error first, then its stored copy.
      await expect(plain.run(notify, declined)).rejects.not.toHaveProperty('replayed');
      await expect(plain.run(notify, declined)).rejects.toMatchObject({ code: 'CARD_DECLINED', replayed: true });

      // export: a result too large, stored as its failure, then replayed.
      const big = { action: 'export', key: 'ORD-5', maxResultBytes: 16 };
      await expect(plain.run(big, () => 'x'.repeat(100))).rejects.toMatchObject({
        code: 'RESULT_TOO_LARGE',
        replayed: false,
      });
      await expect(plain.run(big, () => 'x'.repeat(100))).rejects.toMatchObject({
        code: 'RESULT_TOO_LARGE',
        replayed: true,
      });

      // ship: the killed holder's lease has run out, so the next caller takes over and executes again.
      // sleep: the dead holder's lease must run out for the takeover.
      await sleep(Math.max(0, killed + LEASE + 150 - Date.now()));
      const takenOver = await shipIt();
      expect(takenOver).toMatchObject({ replayed: false, value: 3, record: { attempts: 2 } });
      expect(shipRuns).toBe(1);
      // hold: under 'hold' the vanished holder's record turns unknown, and stays so.
      const holdIt = () => plain.run({ action: 'hold', key: 'ORD-8', lease: LEASE, onLeaseExpired: 'hold' }, () => 1);
      await expect(holdIt()).rejects.toMatchObject({ code: 'OUTCOME_UNKNOWN' });
      await expect(holdIt()).rejects.toMatchObject({ code: 'OUTCOME_UNKNOWN' });

      expect(table(metrics, 'oncely_calls_total')).toEqual({
        'engine ship in_progress': 1,
        'engine ship executed': 1,
        'engine pay executed': 1,
        'engine pay replayed': 3,
        'engine burst executed': 1,
        'engine burst in_progress': 1,
        'engine burst replayed': 1,
        'engine book executed': 1,
        'engine book key_reused': 1,
        'engine refund released': 1,
        'engine refund executed': 1,
        'engine notify failed_stored': 1,
        'engine notify replayed': 1,
        'engine export failed_stored': 1,
        'engine export replayed': 1,
        'engine hold unknown': 2,
      });
      // Every outcome's series exists from an action's first call (at 0 until it happens): 8 actions, 9 outcomes.
      expect(metrics.read('oncely_calls_total')).toHaveLength(8 * 9);
      // Every call but the first of each key found its record (a released one included).
      expect(table(metrics, 'oncely_key_hits_total')).toEqual({
        'engine ship': 2,
        'engine pay': 3,
        'engine burst': 2,
        'engine book': 1,
        'engine refund': 1,
        'engine notify': 1,
        'engine export': 1,
        'engine hold': 2,
      });
      // Duplicates of one input: answered without executing, or (the takeover) executed again.
      expect(table(metrics, 'oncely_duplicates_total')).toEqual({
        'engine ship true': 1,
        'engine ship false': 1,
        'engine pay true': 3,
        'engine burst true': 2,
        'engine notify true': 1,
        'engine export true': 1,
        'engine hold true': 2,
      });
      expect(table(metrics, 'oncely_takeovers_total')).toEqual({ 'engine ship': 1 });
      expect(table(metrics, 'oncely_execution_seconds')).toEqual({
        'engine ship': 1,
        'engine pay': 1,
        'engine burst': 1,
        'engine book': 1,
        'engine refund': 2,
        'engine notify': 1,
        'engine export': 1,
      });
      expect(table(metrics, 'oncely_replay_seconds')).toEqual({
        'engine pay': 3,
        'engine burst': 1,
        'engine notify': 1,
        'engine export': 1,
      });
      for (const name of ['oncely_execution_seconds', 'oncely_replay_seconds'] as const)
        for (const series of metrics.read(name).filter((s) => s.value > 0)) {
          expect(series.buckets?.reduce((a, b) => a + b, 0)).toBe(series.value);
          expect(series.sum, `${name} ${series.labels.join(' ')}`).toBeGreaterThan(0);
        }
      const totals = rateTotals(metrics);
      expect(totals).toMatchObject({ duplicatesIntercepted: 10, duplicates: 11, keyHits: 13, calls: 19 });
      const four = rates(totals);
      expect(four.duplicateInterception).toBe(10 / 11);
      expect(four.keyHit).toBe(13 / 19);
      // Nothing of events or flows was counted here.
      expect(four.staleDrop).toBeNaN();
      expect(four.compensationSuccess).toBeNaN();

      // One hook event per decision, in order: each call's outcome, and the takeover before its execution.
      expect(seen.events.map((e) => `${e.action} ${e.decision}`)).toEqual([
        'ship in_progress',
        'pay executed',
        'pay replayed',
        'pay replayed',
        'pay replayed',
        'burst in_progress',
        'burst executed',
        'burst replayed',
        'book executed',
        'book key_reused',
        'refund released',
        'refund executed',
        'notify failed_stored',
        'notify replayed',
        'export failed_stored',
        'export replayed',
        'ship taken_over',
        'ship executed',
        'hold unknown',
        'hold unknown',
      ]);
      for (const event of seen.events) {
        expect(event).toMatchObject({ surface: 'engine', tenant: 'acme' });
        expect(event.traceId).toEqual(expect.any(String));
        expect(event.requestId).toEqual(expect.any(String));
      }
      const payEvents = seen.events.filter((e) => e.action === 'pay');
      expect(payEvents.map((e) => [e.traceId, e.requestId, e.key])).toEqual([
        ['trace-ORD-1', 'req-1', 'ORD-1'],
        ['trace-ORD-1', 'req-2', 'ORD-1'],
        ['trace-ORD-1', 'req-3', 'ORD-1'],
        ['trace-ORD-1', 'req-4', 'ORD-1'],
      ]);
      const shipEvents = seen.events.filter((e) => e.action === 'ship');
      // The takeover keeps the dead holder's trace; its decision and its execution are one attempt, one request id.
      const holderTrace = shipEvents[0]?.traceId;
      expect(shipEvents.map((e) => e.traceId)).toEqual([holderTrace, holderTrace, holderTrace]);
      expect(shipEvents[1]?.requestId).toBe(shipEvents[2]?.requestId);
      expect(shipEvents[1]).toMatchObject({ fence: takenOver.record.fence, attempt: 2 });
      expect(shipEvents[2]).toMatchObject({ fence: takenOver.record.fence, attempt: 2 });
      expect(shipEvents[0]?.requestId).not.toBe(shipEvents[1]?.requestId);
      const byDecision = (action: string, decision: string) =>
        seen.events.find((e) => e.action === action && e.decision === decision);
      expect(byDecision('book', 'key_reused')?.error).toMatchObject({ code: 'KEY_REUSED' });
      expect(byDecision('refund', 'released')?.error).toEqual({ message: 'gateway down' });
      expect(byDecision('notify', 'failed_stored')?.error).toEqual({ code: 'CARD_DECLINED', message: 'declined' });
      expect(byDecision('export', 'failed_stored')?.error).toMatchObject({ code: 'RESULT_TOO_LARGE' });
      // A replayed failure is a replay: its stored error is the answer, not a failure of this call.
      expect(byDecision('notify', 'replayed')?.error).toBeUndefined();
      expect(byDecision('hold', 'unknown')?.error).toMatchObject({ code: 'OUTCOME_UNKNOWN' });

      // One log line per non-trivial decision: replays, refusals, key reuse, the takeover, unknown.
      const logged = seen.events.filter((e) =>
        ['replayed', 'in_progress', 'key_reused', 'taken_over', 'unknown'].includes(e.decision),
      );
      expect(seen.lines.map((l) => `${l.level} ${l.message}`)).toEqual(
        logged.map((e) => {
          const level =
            e.decision === 'key_reused' || e.decision === 'taken_over'
              ? 'warn'
              : e.decision === 'unknown'
                ? 'error'
                : 'info';
          return `${level} oncely engine ${e.decision}`;
        }),
      );
      expect(seen.lines).toHaveLength(12);
      seen.lines.forEach((line, i) => {
        const event = logged[i];
        expect(line.fields).toMatchObject({
          decision: event?.decision,
          action: event?.action,
          key: event?.key,
          traceId: event?.traceId,
          requestId: event?.requestId,
        });
      });
    });

    it('counts a lease lost: the holder stalls, another process takes over and completes, the holder then finishes', async () => {
      const lost = new Metrics();
      const stalls = capture();
      const holder = await createOncely({
        store: openStore(spec),
        tenant: 'acme',
        metrics: lost,
        logger: stalls.logger,
        onDecision: stalls.onDecision,
        tracer: false,
      });
      const probe = startWorker({ store: spec, mode: 'probe', action: 'stall', key: 'ORD-9', durationMs: 3_000 });
      await probe.waitFor('ready');
      const stalled = holder.run({ action: 'stall', key: 'ORD-9', lease: 150 }, async (ctx) => {
        // Flushed before this process stalls.
        await new Promise((flushed) => probe.child.stdin.write('go\n', flushed));
        // Stalls this process, renewals included, past the lease until the probe has taken the claim over.
        const job = { store: spec, tenant: 'acme', action: 'stall', key: 'ORD-9', fence: ctx.fence };
        execFileSync(process.execPath, ['--import', 'tsx', TAKEN_OVER, JSON.stringify(job)]);
        return 'late';
      });
      await expect(stalled).rejects.toMatchObject({ code: 'LEASE_LOST' });
      const counts = JSON.parse(await probe.waitFor('{')) as { executed: number; replayed: number; other: string[] };
      expect(counts).toMatchObject({ executed: 1, other: [] });
      await probe.exited;
      await holder.close();
      expect(table(lost, 'oncely_calls_total')).toEqual({ 'engine stall lease_lost': 1 });
      expect(table(lost, 'oncely_execution_seconds')).toEqual({ 'engine stall': 1 });
      expect(table(lost, 'oncely_key_hits_total')).toEqual({});
      expect(stalls.events.map((e) => e.decision)).toEqual(['lease_lost']);
      expect(stalls.events[0]?.error).toMatchObject({ code: 'LEASE_LOST' });
      expect(stalls.lines.map((l) => `${l.level} ${l.message}`)).toEqual(['error oncely engine lease_lost']);
    });
  });
}

const sqlitePath = () => join(mkdtempSync(join(tmpdir(), 'oncely-observe-')), 'records.db');
const schema = freshSchema();
const prefix = freshPrefix();
const mixStores: { name: StoreName; spec: () => StoreSpec; cleanup: () => Promise<void> }[] = [
  { name: 'sqlite', spec: () => ({ kind: 'sqlite', path: sqlitePath() }), cleanup: async () => {} },
  {
    name: 'postgres',
    spec: () => ({ kind: 'postgres', connectionString: POSTGRES_URL, schema }),
    cleanup: () => dropSchema(schema),
  },
  {
    name: 'redis',
    spec: () => ({ kind: 'redis', url: REDIS_URL, prefix }),
    cleanup: async () => {
      const client = await connectRedis();
      await dropPrefix(client, prefix);
      await client.close();
    },
  },
];
for (const { name, spec, cleanup } of selectStores(mixStores)) describeMix(name, spec, cleanup);

describe('engine observed when its store fails', () => {
  it('counts store_unavailable, logs it as an error, and finds no key', async () => {
    const metrics = new Metrics();
    const seen = capture();
    const once = await createOncely({
      // Nothing listens on port 1: every store call fails.
      store: postgresStore({ connectionString: 'postgres://postgres@127.0.0.1:1/test' }),
      metrics,
      logger: seen.logger,
      onDecision: seen.onDecision,
      tracer: false,
    });
    await expect(once.run({ action: 'pay', key: 'ORD-1', requestId: 'req-1' }, () => 1)).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
    });
    await once.close();
    expect(table(metrics, 'oncely_calls_total')).toEqual({ 'engine pay store_unavailable': 1 });
    expect(table(metrics, 'oncely_key_hits_total')).toEqual({});
    expect(table(metrics, 'oncely_execution_seconds')).toEqual({});
    expect(seen.lines.map((l) => [l.level, l.message, l.fields.requestId])).toEqual([
      ['error', 'oncely engine store_unavailable', 'req-1'],
    ]);
    expect(seen.events[0]?.error).toMatchObject({ code: 'STORE_UNAVAILABLE' });
  });
});

describe('engine spans', () => {
  let tracing: ReturnType<typeof installTracing>;
  let once: Oncely;
  beforeAll(async () => {
    tracing = installTracing();
    once = await createOncely({ store: sqliteStore({ path: sqlitePath() }), tenant: 'acme', metrics: false });
  });
  afterAll(async () => {
    tracing.uninstall();
    await once.close();
  });

  it('spans each execution and replay under the span active around run; spans the function starts are children', async () => {
    const tracer = trace.getTracer('test');
    const request = { action: 'pay', key: 'ORD-1', traceId: 'trace-ORD-1' };
    const { caller, result } = await tracer.startActiveSpan('caller', async (caller) => {
      const result = await once.run(request, async () => {
        tracer.startSpan('gateway').end();
        return 'paid';
      });
      caller.end();
      return { caller, result };
    });
    const again = await tracer.startActiveSpan('retry', async (retry) => {
      await once.run(request, () => 'again');
      retry.end();
      return retry;
    });
    await expect(
      once.run({ action: 'refund', key: 'ORD-2' }, () => {
        throw new Error('gateway down');
      }),
    ).rejects.toThrow('gateway down');

    const spans = tracing.exporter.getFinishedSpans();
    const named = (n: string) => spans.filter((s) => s.name === n);
    expect(spans.map((s) => s.name).sort()).toEqual(
      ['caller', 'gateway', 'oncely.execute', 'oncely.execute', 'oncely.replay', 'retry'].sort(),
    );
    const [execute, failed] = named('oncely.execute');
    const [gateway] = named('gateway');
    const [replay] = named('oncely.replay');
    expect(execute?.parentSpanContext?.spanId).toBe(caller.spanContext().spanId);
    expect(execute?.spanContext().traceId).toBe(caller.spanContext().traceId);
    expect(execute?.attributes).toEqual({
      'oncely.action': 'pay',
      'oncely.surface': 'engine',
      'oncely.outcome': 'executed',
      'oncely.replayed': false,
      'oncely.attempt': 1,
      'oncely.fence': 1,
      'oncely.trace_id': result.record.traceId,
    });
    expect(result.record.traceId).toBe('trace-ORD-1');
    expect(gateway?.parentSpanContext?.spanId).toBe(execute?.spanContext().spanId);
    expect(replay?.parentSpanContext?.spanId).toBe(again.spanContext().spanId);
    expect(replay?.attributes).toMatchObject({
      'oncely.action': 'pay',
      'oncely.outcome': 'replayed',
      'oncely.replayed': true,
      'oncely.trace_id': 'trace-ORD-1',
    });
    expect(failed?.attributes).toMatchObject({ 'oncely.action': 'refund', 'oncely.outcome': 'released' });
    // SpanStatusCode.ERROR is 2.
    expect(failed?.status).toEqual({ code: 2, message: 'gateway down' });
    expect(execute?.status.code).toBe(0);
  });

  it('makes no span and fails nothing when no provider is registered, or with tracer: false', async () => {
    const quiet = await createOncely({
      store: sqliteStore({ path: sqlitePath() }),
      tenant: 'acme',
      metrics: false,
      tracer: false,
    });
    tracing.exporter.reset();
    expect(await quiet.run({ action: 'pay', key: 'ORD-3' }, () => 1)).toMatchObject({ replayed: false });
    expect(tracing.exporter.getFinishedSpans()).toEqual([]);
    await quiet.close();
    tracing.uninstall();
    expect(await once.run({ action: 'pay', key: 'ORD-4' }, () => 1)).toMatchObject({ replayed: false });
    expect(await once.run({ action: 'pay', key: 'ORD-4' }, () => 2)).toMatchObject({ replayed: true, value: 1 });
    expect(tracing.exporter.getFinishedSpans()).toEqual([]);
  });
});
