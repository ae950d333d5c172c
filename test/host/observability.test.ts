/**
 * The host observed, on SQLite and PostgreSQL: a known mix of executions, a replay, key reuse, a
 * concurrent duplicate, outbox deliveries, duplicate, conflicting and stale events, and dead
 * letters replayed, each counter asserted exactly in the host's metrics, in its database totals
 * (`GET /v1/stats`, the same after a restart), in `GET /metrics` as Prometheus parses it; the
 * decision lines and hook events; the trace and request ids of invocations; spans.
 */
import { SpanStatusCode, trace } from '@opentelemetry/api';
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { DecisionEvent, OncelyLogger } from '../../src/core/observer.js';
import { defineFlow } from '../../src/flows/define.js';
import type { HostStats } from '../../src/host/stats.js';
import { capture, installTracing, type LogLine } from '../engine/support/observe.js';
import { hostTargets, type RunningHost, startHost, type TestApp } from '../support/host-app.js';
import { until } from '../support/wait.js';

interface Deferred {
  promise: Promise<void>;
  resolve: () => void;
}
const deferred = (): Deferred => {
  let resolve = () => {};
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
};

/** The app of the mix: a handler that enqueues, a slow one, an ordered consumer, a failing one. */
function mixApp(
  observed: { logger: OncelyLogger; onDecision: (e: DecisionEvent) => void },
  slow: { entered: Deferred; gate: Deferred } = { entered: deferred(), gate: deferred() },
) {
  let made = 0;
  const app: TestApp = {
    config: {
      sources: { shop: { kind: 'id-field', idField: 'id', typeField: 'type', unsigned: true } },
      events: { maxAttempts: 2, backoff: 1 },
      logger: observed.logger,
      onDecision: observed.onDecision,
    },
    handlers: {
      'things.make': {
        handle: async (input, ctx) => {
          made++;
          const { id } = input as { id: string };
          await ctx.outbox.enqueue('thing.made', { id });
          // A span of the app's own: a child of the engine's execute span (none without a provider).
          trace.getTracer('test-app').startSpan('app.work').end();
          ctx.log.info({ id }, 'thing made');
          return { id, made, traceId: ctx.traceId, requestId: ctx.requestId };
        },
      },
      'things.slow': {
        handle: async () => {
          slow.entered.resolve();
          await slow.gate.promise;
          return { slow: true };
        },
      },
    },
    consumers: {
      'outbox/thing.made': { handle: () => undefined },
      'shop/stock.set': {
        ordering: {
          aggregate: (e) => `sku:${(e.data as { sku: string }).sku}`,
          version: (e) => (e.data as { v: number }).v,
        },
        handle: () => undefined,
      },
      'shop/bad.thing': {
        handle: () => {
          throw Object.assign(new Error('downstream is down'), { code: 'DOWN' });
        },
      },
    },
  };
  return app;
}

const HANDLER = 'handler';
const MAKE = 'POST things.make';
const SLOW = 'POST things.slow';

/** Every counter the mix moves, by metric and label values; a count left out of this list is 0. */
const EXPECTED: Record<string, Record<string, number>> = {
  oncely_calls_total: {
    [`${HANDLER}|${MAKE}|executed`]: 2,
    [`${HANDLER}|${MAKE}|replayed`]: 1,
    [`${HANDLER}|${MAKE}|key_reused`]: 1,
    [`${HANDLER}|${SLOW}|executed`]: 1,
    [`${HANDLER}|${SLOW}|in_progress`]: 1,
    'consumer|consume:outbox/thing.made|executed': 2,
    'consumer|consume:shop/stock.set|executed': 1,
    // Two attempts, then two more after the replay: each fails and frees its key.
    'consumer|consume:shop/bad.thing|released': 4,
  },
  oncely_key_hits_total: { [`${HANDLER}|${MAKE}`]: 2, [`${HANDLER}|${SLOW}`]: 1 },
  oncely_duplicates_total: {
    [`${HANDLER}|${MAKE}|true`]: 1,
    [`${HANDLER}|${SLOW}|true`]: 1,
    // The webhook delivered twice: intercepted at intake.
    'webhook|shop/stock.set|true': 1,
  },
  oncely_events_total: {
    'outbox|thing.made|accepted': 2,
    'outbox|thing.made|applied': 2,
    'shop|stock.set|accepted': 2,
    'shop|stock.set|duplicate': 1,
    'shop|stock.set|conflict': 1,
    'shop|stock.set|applied': 1,
    'shop|stock.set|stale': 1,
    'shop|bad.thing|accepted': 1,
    'shop|bad.thing|retrying': 2,
    'shop|bad.thing|dead_lettered': 2,
    'shop|bad.thing|replayed_from_dead_letter': 1,
  },
  oncely_events_ordered_total: { 'shop|stock.set': 2 },
  oncely_outbox_total: { 'thing.made|enqueued': 2, 'thing.made|delivered': 2 },
};

/** The non-zero counter series of stats, as EXPECTED lists them. */
function countersOf(stats: HostStats): Record<string, Record<string, number>> {
  const out: Record<string, Record<string, number>> = {};
  for (const [name, series] of Object.entries(stats.totals))
    for (const { labels, value } of series)
      if (value !== 0) {
        out[name] ??= {};
        (out[name] as Record<string, number>)[Object.values(labels).join('|')] = value;
      }
  return out;
}

const RATE_TOTALS = {
  duplicatesIntercepted: 3,
  duplicates: 3,
  keyHits: 3,
  calls: 13,
  staleEvents: 1,
  orderedEvents: 2,
  compensationsSucceeded: 0,
  compensations: 0,
};

const webhook = (base: string, body: Record<string, unknown>, headers: Record<string, string> = {}) =>
  fetch(`${base}/v1/webhooks/shop`, { method: 'POST', body: JSON.stringify(body), headers }).then(
    async (r) => (await r.json()) as { data: { outcome: string } },
  );

const statsOf = async (base: string): Promise<HostStats> =>
  ((await (await fetch(`${base}/v1/stats`)).json()) as { data: HostStats }).data;

for (const { name, target: makeTarget, cleanup } of hostTargets())
  describe(`host observability on ${name}`, () => {
    afterAll(cleanup);
    const running: RunningHost[] = [];
    afterEach(async () => {
      for (const h of running.splice(0)) await h.stop();
    });

    it('counts a known mix exactly: metrics, database totals, /v1/stats, /metrics; the same after a restart', async () => {
      const target = makeTarget();
      const seen = capture();
      const slowly = { entered: deferred(), gate: deferred() };
      const h = await startHost(target, mixApp(seen, slowly));
      running.push(h);
      const invoke = (handler: string, body: unknown, key: string, headers: Record<string, string> = {}) =>
        h.invoke(handler, body, { 'idempotency-key': key, ...headers });

      // Handlers: two executions, a replay, a key reused, a duplicate of a running key.
      const first = await invoke('things.make', { id: 'a' }, 'k1', {
        'oncely-trace-id': 'intent-1',
        'x-request-id': 'r-1',
      });
      expect(first.status).toBe(200);
      expect(first.body).toMatchObject({ code: 0, data: { id: 'a', traceId: 'intent-1', requestId: 'r-1' } });
      expect(first.body).toMatchObject({ traceId: 'intent-1', requestId: 'r-1' });
      expect([first.headers.get('oncely-trace-id'), first.headers.get('x-request-id')]).toEqual(['intent-1', 'r-1']);
      // The retry of the intent: a trace id of its own is ignored, the first claim's is kept.
      const again = await invoke('things.make', { id: 'a' }, 'k1', {
        'oncely-trace-id': 'other',
        'x-request-id': 'r-2',
      });
      // The envelope is the first answer's, naming the request that ran; the header is this one's.
      expect(again).toMatchObject({
        status: 200,
        body: { data: first.body.data, traceId: 'intent-1', requestId: 'r-1' },
      });
      expect([again.headers.get('oncely-trace-id'), again.headers.get('x-request-id')]).toEqual(['intent-1', 'r-2']);
      const reused = await invoke('things.make', { id: 'b' }, 'k1');
      expect(reused).toMatchObject({ status: 422, body: { error: { code: 'KEY_REUSED' }, traceId: 'intent-1' } });
      expect(reused.body.requestId).toEqual(reused.headers.get('x-request-id'));
      expect((await invoke('things.make', { id: 'c' }, 'k2')).status).toBe(200);
      const slow = invoke('things.slow', {}, 's1');
      // The first holds its key (its handler waits on the gate) until the duplicate was refused.
      await slowly.entered.promise;
      const refused = await invoke('things.slow', {}, 's1');
      expect(refused).toMatchObject({ status: 409, body: { error: { code: 'IN_PROGRESS' } } });
      slowly.gate.resolve();
      expect((await slow).status).toBe(200);

      // Events: a duplicate, a conflict, a stale one under ordering, a dead letter replayed and dead again.
      expect((await webhook(h.base, { id: 'e1', type: 'stock.set', sku: 'A', v: 2 })).data.outcome).toBe('accepted');
      expect((await webhook(h.base, { id: 'e1', type: 'stock.set', sku: 'A', v: 2 })).data.outcome).toBe('duplicate');
      expect((await webhook(h.base, { id: 'e1', type: 'stock.set', sku: 'A', v: 9 })).data.outcome).toBe('conflict');
      await h.host.events.drain();
      expect((await webhook(h.base, { id: 'e2', type: 'stock.set', sku: 'A', v: 1 })).data.outcome).toBe('accepted');
      expect((await webhook(h.base, { id: 'e3', type: 'bad.thing' })).data.outcome).toBe('accepted');
      await h.host.events.drain();
      expect(await h.host.events.replay('all')).toBe(1);
      await h.host.events.drain();
      // The outbox: both messages of the executions delivered to their consumer.
      await until(
        'both outbox messages delivered',
        () => h.host.metrics.value('oncely_outbox_total', ['thing.made', 'delivered']),
        (n) => n >= 2,
      );
      await h.host.events.drain();

      // This process's metrics.
      const { metrics } = h.host;
      for (const [metric, series] of Object.entries(EXPECTED))
        for (const [labels, value] of Object.entries(series))
          expect([metric, labels, metrics.value(metric as 'oncely_calls_total', labels.split('|'))]).toEqual([
            metric,
            labels,
            value,
          ]);

      // The database totals, through GET /v1/stats: every non-zero series is one of the mix.
      const stats = await statsOf(h.base);
      expect(countersOf(stats)).toEqual(EXPECTED);
      expect(stats.rateTotals).toEqual(RATE_TOTALS);
      expect(stats.rates).toEqual({
        duplicateInterception: { value: 1, target: 0.999 },
        keyHit: { value: 3 / 13, target: null },
        staleDrop: { value: 0.5, target: null },
        compensationSuccess: { value: null, target: 1 },
      });
      // The old endpoint sums the same totals by outcome.
      const eventStats = (await (await fetch(`${h.base}/v1/events/stats`)).json()) as { data: Record<string, number> };
      expect(eventStats.data).toEqual({
        accepted: 5,
        duplicate: 1,
        conflict: 1,
        applied: 3,
        stale: 1,
        retrying: 2,
        dead_lettered: 2,
        replayed_from_dead_letter: 1,
        deferred: 0,
      });

      // GET /metrics: this process's metrics in the text format, as Prometheus reads them.
      const scraped = await fetch(`${h.base}/metrics`);
      expect(scraped.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
      const text = await scraped.text();
      const families = parsePrometheusTextFormat(text);
      for (const [metric, series] of Object.entries(EXPECTED)) {
        const family = families.find((f) => f.name === metric);
        expect(family?.type).toBe('COUNTER');
        const values = Object.fromEntries(
          (family?.metrics ?? [])
            .filter((m) => Number(m.value) !== 0)
            .map((m) => [Object.values(m.labels ?? {}).join('|'), Number(m.value)]),
        );
        expect([metric, values]).toEqual([metric, series]);
      }
      // The parser keeps one series of a histogram family: the execution histogram is read from its lines.
      expect(families.find((f) => f.name === 'oncely_execution_seconds')?.type).toBe('HISTOGRAM');
      expect(text).toContain(`oncely_execution_seconds_count{surface="handler",action="${MAKE}"} 2\n`);
      expect(text).toContain(`oncely_replay_seconds_count{surface="handler",action="${MAKE}"} 1\n`);

      // Decisions: one line each for the ones worth it, every one to the hook.
      const lines = (decision: string) => seen.lines.filter((l: LogLine) => l.message.endsWith(` ${decision}`));
      expect(lines('replayed')).toMatchObject([
        {
          level: 'info',
          message: 'oncely handler replayed',
          fields: { action: MAKE, key: 'k1', traceId: 'intent-1', requestId: 'r-2' },
        },
      ]);
      expect(lines('key_reused')).toMatchObject([
        { level: 'warn', fields: { action: MAKE, key: 'k1', traceId: 'intent-1' } },
      ]);
      expect(lines('in_progress')).toMatchObject([{ level: 'info', fields: { action: SLOW, key: 's1' } }]);
      expect(lines('stale')).toMatchObject([
        { level: 'info', message: 'oncely events stale', fields: { action: 'stock.set', key: 'e2', source: 'shop' } },
      ]);
      expect(lines('conflict')).toMatchObject([{ level: 'warn', fields: { action: 'stock.set', key: 'e1' } }]);
      expect(lines('dead_lettered')).toMatchObject([
        {
          level: 'error',
          message: 'oncely events dead_lettered',
          fields: { key: 'e3', attempt: 2, error: { message: expect.stringContaining('downstream is down') } },
        },
        { level: 'error', fields: { key: 'e3', attempt: 2 } },
      ]);
      // Failures keep their line, in pino's shape: fields first, then the message.
      expect(seen.lines.filter((l) => l.message === 'consumer failed')).toHaveLength(4);
      // ctx.log goes to the app's logger with the execution's ids.
      expect(seen.lines.filter((l) => l.message === 'thing made')).toMatchObject([
        { level: 'info', fields: { id: 'a', traceId: 'intent-1', requestId: 'r-1' } },
        { level: 'info', fields: { id: 'c' } },
      ]);
      const hooked = (decision: string, surface: string) =>
        seen.events.filter((e) => e.decision === decision && e.surface === surface).length;
      expect({
        executed: hooked('executed', 'handler'),
        replayed: hooked('replayed', 'handler'),
        keyReused: hooked('key_reused', 'handler'),
        inProgress: hooked('in_progress', 'handler'),
        consumed: hooked('executed', 'consumer'),
        released: hooked('released', 'consumer'),
        duplicate: hooked('duplicate', 'events'),
        conflict: hooked('conflict', 'events'),
        stale: hooked('stale', 'events'),
        deadLettered: hooked('dead_lettered', 'events'),
      }).toEqual({
        executed: 3,
        replayed: 1,
        keyReused: 1,
        inProgress: 1,
        consumed: 3,
        released: 4,
        duplicate: 1,
        conflict: 1,
        stale: 1,
        deadLettered: 2,
      });

      // A restart: the totals are the database's, not the process's.
      running.splice(0);
      await h.stop();
      const restarted = await startHost(target, mixApp(capture()));
      running.push(restarted);
      expect(restarted.host.metrics.sum('oncely_calls_total')).toBe(0);
      const after = await statsOf(restarted.base);
      expect(countersOf(after)).toEqual(EXPECTED);
      expect(after.rateTotals).toEqual(RATE_TOTALS);
    });

    it('continues a caller traceparent into the engine span, and spans each consumer delivery', async () => {
      const tracing = installTracing();
      try {
        const h = await startHost(makeTarget(), mixApp(capture()));
        running.push(h);
        const parent = '4bf92f3577b34da6a3ce929d0e0e4736';
        const res = await h.invoke(
          'things.make',
          { id: 'traced' },
          { 'idempotency-key': 't1', traceparent: `00-${parent}-00f067aa0ba902b7-01` },
        );
        expect(res.status).toBe(200);
        await webhook(h.base, { id: 'e-bad', type: 'bad.thing' }, { traceparent: `00-${parent}-00f067aa0ba902b8-01` });
        await h.host.events.drain();
        await until(
          'the outbox message applied by its consumer',
          () => h.host.metrics.value('oncely_events_total', ['outbox', 'thing.made', 'applied']),
          (n) => n >= 1,
        );
        const spans = tracing.exporter.getFinishedSpans();
        const execute = spans.find((s) => s.name === 'oncely.execute' && s.attributes['oncely.action'] === MAKE);
        expect(execute?.spanContext().traceId).toBe(parent);
        expect(execute?.parentSpanContext?.spanId).toBe('00f067aa0ba902b7');
        expect(execute?.attributes).toMatchObject({ 'oncely.surface': 'handler', 'oncely.outcome': 'executed' });
        const work = spans.find((s) => s.name === 'app.work');
        expect([work?.spanContext().traceId, work?.parentSpanContext?.spanId]).toEqual([
          parent,
          execute?.spanContext().spanId,
        ]);
        const intake = spans.filter((s) => s.name === 'oncely.intake');
        expect(intake.map((s) => [s.spanContext().traceId, s.parentSpanContext?.spanId, s.attributes])).toEqual([
          [
            parent,
            '00f067aa0ba902b8',
            {
              'oncely.source': 'shop',
              'oncely.type': 'bad.thing',
              'oncely.event_id': 'e-bad',
              'oncely.outcome': 'accepted',
            },
          ],
        ]);
        const consumed = spans.filter((s) => s.name === 'oncely.consume');
        const bad = consumed.filter((s) => s.attributes['oncely.type'] === 'bad.thing');
        expect(bad.map((s) => [s.attributes['oncely.attempt'], s.attributes['oncely.outcome'], s.status.code])).toEqual(
          [
            [1, 'retrying', SpanStatusCode.ERROR],
            [2, 'dead_lettered', SpanStatusCode.ERROR],
          ],
        );
        expect(bad[0]?.attributes).toMatchObject({ 'oncely.source': 'shop', 'oncely.event_id': 'e-bad' });
        const made = consumed.find((s) => s.attributes['oncely.type'] === 'thing.made');
        expect(made?.attributes).toMatchObject({
          'oncely.source': 'outbox',
          'oncely.outcome': 'applied',
          'oncely.attempt': 1,
        });
        // The consumer's engine run is a child of its delivery's span.
        const run = spans.find((s) => s.attributes['oncely.action'] === 'consume:outbox/thing.made');
        expect(run?.parentSpanContext?.spanId).toBe(made?.spanContext().spanId);
      } finally {
        tracing.uninstall();
      }
    });

    it("writes a handler's and a consumer's engine counts in their transactions; a rolled-back run's at the flush", async () => {
      const h = await startHost(makeTarget(), {
        ...mixApp(capture()),
        handlers: {
          ...mixApp(capture()).handlers,
          'things.fail': {
            handle: () => {
              throw new Error('no');
            },
          },
        },
      });
      running.push(h);
      // No timer: only transactions (and the explicit flush below) write.
      await h.host.totals.stop();
      const written = async () => {
        const rows = await h.rows<{ metric: string; labels: string; value: number | string }>(
          "SELECT metric, labels, SUM(value) AS value FROM oncely_totals WHERE metric = 'oncely_calls_total' GROUP BY metric, labels",
        );
        // (On PostgreSQL the schema holds the tests before too: what they wrote is taken off.)
        return Object.fromEntries(
          rows
            .map(
              (r) =>
                [
                  JSON.parse(r.labels).join('|'),
                  Number(r.value) - (earlier[JSON.parse(r.labels).join('|')] ?? 0),
                ] as const,
            )
            .filter(([, n]) => n !== 0),
        );
      };
      let earlier: Record<string, number> = {};
      earlier = await written();
      expect((await h.invoke('things.make', { id: 'w' }, { 'idempotency-key': 'w1' })).status).toBe(200);
      expect((await h.invoke('things.make', { id: 'w' }, { 'idempotency-key': 'w1' })).status).toBe(200);
      expect((await h.invoke('things.fail', {}, { 'idempotency-key': 'f1' })).status).toBe(500);
      await until(
        'the outbox message applied by its consumer',
        () => h.host.metrics.value('oncely_events_total', ['outbox', 'thing.made', 'applied']),
        (n) => n >= 1,
      );
      const before = await written();
      expect(before).toEqual({
        [`handler|${MAKE}|executed`]: 1,
        [`handler|${MAKE}|replayed`]: 1,
        'consumer|consume:outbox/thing.made|executed': 1,
      });
      await h.host.totals.flush();
      expect(await written()).toEqual({ ...before, 'handler|POST things.fail|released': 1 });
      expect(h.host.metrics.sum('oncely_calls_total')).toBe(4);
    });

    it("counts the host's flows into its totals: the compensation success rate in /v1/stats", async () => {
      const undone: string[] = [];
      const order = defineFlow('order', { seed: ['id'] }, async (run, input: { id: string }) => {
        await run.step('charge', () => `ch-${input.id}`, { compensate: (charge) => void undone.push(String(charge)) });
        await run.step(
          'ship',
          () => {
            throw new Error('no courier');
          },
          { retry: { attempts: 1 } },
        );
      });
      const h = await startHost(makeTarget(), {
        config: {},
        flows: [order],
        handlers: {
          'orders.place': { handle: (input, ctx) => ctx.flows.start(order, input as { id: string }) },
        },
      });
      running.push(h);
      const placed = await h.invoke('orders.place', { id: 'o1' }, { 'idempotency-key': 'p1' });
      const { workflowId } = placed.body.data as { workflowId: string };
      await until(
        'the flow failed',
        async () => (await h.host.flows?.get(workflowId))?.status,
        (status) => status === 'failed',
      );
      expect(undone).toEqual(['ch-o1']);
      const stats = await statsOf(h.base);
      expect(countersOf(stats).oncely_flows_total).toEqual({ 'order|started': 1, 'order|failed': 1 });
      expect(countersOf(stats).oncely_compensations_total).toEqual({ 'flow|order|succeeded': 1 });
      expect(stats.rates.compensationSuccess).toEqual({ value: 1, target: 1 });
    });

    it('refuses a malformed Oncely-Trace-Id with TRACE_ID_INVALID, in the envelope with a request id', async () => {
      const h = await startHost(makeTarget(), mixApp(capture()));
      running.push(h);
      const res = await h.invoke(
        'things.make',
        { id: 'x' },
        { 'idempotency-key': 'bad', 'oncely-trace-id': 'has space' },
      );
      expect(res).toMatchObject({ status: 400, body: { code: 400, error: { code: 'TRACE_ID_INVALID' } } });
      expect(res.body.requestId).toEqual(res.headers.get('x-request-id'));
      expect(h.host.metrics.sum('oncely_calls_total')).toBe(0);
    });
  });
