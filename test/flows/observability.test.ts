/**
 * Flows observed: a known mix (a flow started twice, a step retried, steps memoized after a wait and
 * after a worker was killed with SIGKILL, a saga whose compensations succeed and one fails, resumed
 * and failing again) counted exactly into a fresh Metrics, spanned with correct parentage, and
 * reported as log lines and hook events.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { context } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type MetricName, Metrics, processMetrics, rates, rateTotals } from '../../src/core/metrics.js';
import type { DecisionEvent } from '../../src/core/observer.js';
import { type Db, openDb } from '../../src/db/index.js';
import { createFlows, defineFlow } from '../../src/flows/index.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { startWorker } from '../support/spawn.js';
import { selectStores } from '../support/store-filter.js';
import { until } from '../support/wait.js';
import { crashFlow } from './support/observed-flow.js';

const WORKER = fileURLToPath(new URL('./support/observed-worker.ts', import.meta.url));
class Declined extends Error {
  readonly code = 'DECLINED';
}

/** Every series of a counter as [labels..., value], sorted: the whole metric, nothing left out. */
function seriesOf(metrics: Metrics, name: MetricName): (string | number)[][] {
  return metrics
    .read(name)
    .map((s) => [...s.labels, s.value])
    .sort((a, b) => a.join().localeCompare(b.join()));
}

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const contextManager = new AsyncLocalStorageContextManager();

beforeAll(() => {
  context.setGlobalContextManager(contextManager.enable());
});
afterAll(() => {
  context.disable();
});

function describeObserved(name: string, open: () => Promise<{ target: string; cleanup: () => Promise<void> }>) {
  describe(`flows observed: ${name}`, () => {
    let target: string;
    let cleanup: () => Promise<void>;
    let db: Db;
    beforeAll(async () => {
      ({ target, cleanup } = await open());
      db = await openDb(target);
    });
    afterAll(async () => {
      await db?.close();
      await cleanup?.();
    });

    it('counts starts, steps, retries, memos and compensations exactly; spans runs and steps; logs and hooks each decision', async () => {
      const tag = randomUUID().slice(0, 8);
      const metrics = new Metrics();
      const lines: { level: string; fields: Record<string, unknown>; message: string }[] = [];
      const line = (level: string) => (fields: Record<string, unknown>, message: string) =>
        void lines.push({ level, fields, message });
      const logger = { info: line('info'), warn: line('warn'), error: line('error') };
      const events: DecisionEvent[] = [];
      const appTracer = provider.getTracer('app');

      const ok = defineFlow<{ id: string }, unknown>(`obs-ok-${tag}`, { seed: ['id'] }, async (run) => {
        const a = await run.step('a', () => 'A');
        const b = await run.step(
          'b',
          (s) => {
            if (s.attempt === 1) throw new Error('flaky');
            return 'B';
          },
          { retry: { backoff: '1ms' } },
        );
        // A failure the flow goes on from: answered from its memo on the next run, counted as memoized.
        await run
          .step(
            'optional',
            () => {
              throw new Declined('not today');
            },
            { retry: { final: () => true } },
          )
          .catch(() => null);
        const go = await run.waitFor<string>('go');
        // A span the step's function starts is a child of the step's span.
        const c = await run.step('c', () => {
          appTracer.startSpan('app.work').end();
          return 'C';
        });
        return [a, b, go, c];
      });
      const undone: string[] = [];
      const saga = defineFlow<{ id: string }, unknown>(`obs-saga-${tag}`, { seed: ['id'] }, async (run) => {
        await run.step('r1', () => 1, { compensate: () => void undone.push('r1') });
        await run.step('r2', () => 2, {
          compensate: () => {
            undone.push('r2');
            throw new Error('refund down');
          },
        });
        await run.step('r3', () => 3, { compensate: () => void undone.push('r3') });
        await run.step(
          'boom',
          () => {
            throw new Declined('no courier');
          },
          { retry: { final: (e) => e instanceof Declined } },
        );
      });
      const crash = crashFlow(tag, async () => 'done here');

      const flows = await createFlows({
        db,
        flows: [ok, saga, crash],
        poll: '20ms',
        lease: '5s',
        metrics,
        logger,
        onDecision: (event) => void events.push(event),
        tracer: provider.getTracer('oncely'),
      });
      exporter.reset();
      try {
        // A worker in another process runs the crash flow's first two steps and is killed in the third.
        const { workflowId: crashId } = await flows.start(crash, { id: 'K1' });
        const worker = startWorker({ target, tag, lease: 400 }, WORKER);
        await worker.waitFor('hanging');
        worker.child.kill('SIGKILL');
        await worker.exited;
        await flows.startWorker();
        // After its lease ran out this worker takes it over: a and b answer from their memos.
        expect(await flows.result(crashId, { timeout: '15s' })).toEqual(['A', 'B', 'done here']);

        const first = await flows.start(ok, { id: 'O1' });
        expect(await flows.start(ok, { id: 'O1' })).toEqual({ workflowId: first.workflowId, already: true });
        await until(
          'the flow waiting',
          async () => (await flows.get(first.workflowId))?.status,
          (status) => status === 'waiting',
        );
        await flows.signal(first.workflowId, 'go', 'GO', { signalId: 'go-1' });
        expect(await flows.result(first.workflowId, { timeout: '15s' })).toEqual(['A', 'B', 'GO', 'C']);

        const { workflowId: sagaId } = await flows.start(saga, { id: 'S1' });
        await expect(flows.result(sagaId, { timeout: '15s' })).rejects.toMatchObject({ code: 'FLOW_FAILED' });
        expect(undone).toEqual(['r3', 'r2', 'r2', 'r2', 'r1']);
        // Resumed from its failed step: it fails again; the stored compensations are not run or counted again.
        expect(await flows.retry(sagaId)).toBe(true);
        // The run counts its failure right after the commit that a reader may see first: wait for both.
        await until(
          'the retried saga failed again, and counted',
          async () => ({
            flow: await flows.get(sagaId),
            failures: metrics.value('oncely_flows_total', [saga.name, 'failed']),
          }),
          ({ flow, failures }) => flow?.runs === 2 && flow.status === 'failed' && failures === 2,
        );
        expect(undone).toEqual(['r3', 'r2', 'r2', 'r2', 'r1', 'r2', 'r2', 'r2']);

        const runs = [
          [crash.name, 'completed', 1],
          [crash.name, 'started', 1],
          [ok.name, 'already', 1],
          [ok.name, 'completed', 1],
          [ok.name, 'started', 1],
          [saga.name, 'failed', 2],
          [saga.name, 'started', 1],
        ];
        // A run counts its end right after the commit a reader may see first: wait for the counts to settle.
        await until(
          'the flow counts settled',
          () => seriesOf(metrics, 'oncely_flows_total'),
          (series) => JSON.stringify(series) === JSON.stringify(runs),
          { timeoutMs: 5_000 },
        ).catch(() => undefined);
        expect(seriesOf(metrics, 'oncely_flows_total')).toEqual(runs);
        expect(seriesOf(metrics, 'oncely_flow_steps_total')).toEqual([
          [crash.name, 'executed', 1],
          [crash.name, 'memoized', 2],
          [ok.name, 'executed', 3],
          [ok.name, 'failed', 1],
          [ok.name, 'memoized', 3],
          [ok.name, 'retried', 1],
          [saga.name, 'executed', 3],
          [saga.name, 'failed', 2],
          [saga.name, 'memoized', 3],
        ]);
        expect(seriesOf(metrics, 'oncely_compensations_total')).toEqual([
          ['flow', saga.name, 'failed', 2],
          ['flow', saga.name, 'succeeded', 2],
        ]);
        const totals = rateTotals(metrics);
        expect(totals).toMatchObject({ compensationsSucceeded: 2, compensations: 4 });
        expect(rates(totals).compensationSuccess).toBe(0.5);
        // Flows run no engine call: nothing else was counted.
        expect(metrics.read('oncely_calls_total')).toEqual([]);

        // Decisions: the hook gets each one, the logger a line each.
        expect(events.map((e) => [e.decision, e.action, e.key, e.detail?.stepId ?? null])).toEqual([
          ['step_retried', ok.name, first.workflowId, 'b'],
          ['compensation_failed', saga.name, sagaId, 'compensate:r2'],
          ['flow_failed', saga.name, sagaId, null],
          ['compensation_failed', saga.name, sagaId, 'compensate:r2'],
          ['flow_failed', saga.name, sagaId, null],
        ]);
        expect(events.every((e) => e.surface === 'flow')).toBe(true);
        expect(events[0]).toMatchObject({ attempt: 1, error: { message: 'flaky' } });
        expect(events[1]).toMatchObject({ error: { message: 'refund down' } });
        expect(events[2]).toMatchObject({ attempt: 1, error: { code: 'DECLINED' } });
        expect(events[2]?.error?.message).toContain('no courier');
        expect(events[4]).toMatchObject({ attempt: 2 });
        expect(lines.map((l) => [l.level, l.message, l.fields.workflowId])).toEqual([
          ['warn', 'oncely flow step_retried', first.workflowId],
          ['error', 'oncely flow compensation_failed', sagaId],
          ['error', 'oncely flow flow_failed', sagaId],
          ['error', 'oncely flow compensation_failed', sagaId],
          ['error', 'oncely flow flow_failed', sagaId],
        ]);
        expect(lines[0]?.fields).toMatchObject({ stepId: 'b', action: ok.name, key: first.workflowId });

        // Spans: one per run, one per step under it.
        const spans = exporter.getFinishedSpans();
        const runsOf = (flowName: string) =>
          spans.filter((s) => s.name === 'oncely.flow' && s.attributes['oncely.flow'] === flowName);
        const stepsUnder = (run: ReadableSpan) =>
          spans
            .filter((s) => s.name === 'oncely.step' && s.parentSpanContext?.spanId === run.spanContext().spanId)
            .sort((x, y) => Number(x.attributes['oncely.step_index']) - Number(y.attributes['oncely.step_index']))
            .map((s) => [s.attributes['oncely.step'], s.attributes['oncely.outcome'], s.attributes['oncely.memoized']]);
        const attrs = (s: ReadableSpan) => [
          s.attributes['oncely.workflow_id'],
          s.attributes['oncely.attempt'],
          s.attributes['oncely.outcome'],
        ];

        const [crashRun, ...crashMore] = runsOf(crash.name);
        expect(crashMore).toEqual([]);
        if (!crashRun) throw new Error('no span of the crash flow');
        // The killed worker made the first claim (and more, if a slow renewal let it claim its own
        // flow again): this run is the last claim, under a newer fence.
        const claims = (await flows.get(crashId))?.runs;
        expect(claims).toBeGreaterThan(1);
        expect(attrs(crashRun)).toEqual([crashId, claims, 'completed']);
        expect(crashRun.attributes['oncely.fence']).toBeGreaterThan(1);
        expect(stepsUnder(crashRun)).toEqual([
          ['a', 'memoized', true],
          ['b', 'memoized', true],
          ['last', 'executed', false],
        ]);

        const okRuns = runsOf(ok.name);
        expect(okRuns.map(attrs)).toEqual([
          [first.workflowId, 1, 'waiting'],
          [first.workflowId, 2, 'completed'],
        ]);
        const [okFirst, okSecond] = okRuns as [ReadableSpan, ReadableSpan];
        expect(stepsUnder(okFirst)).toEqual([
          ['a', 'executed', false],
          ['b', 'executed', false],
          ['optional', 'failed', false],
        ]);
        expect(stepsUnder(okSecond)).toEqual([
          ['a', 'memoized', true],
          ['b', 'memoized', true],
          ['optional', 'memoized', true],
          ['c', 'executed', false],
        ]);
        const stepB = spans.find(
          (s) => s.attributes['oncely.step'] === 'b' && s.parentSpanContext?.spanId === okFirst.spanContext().spanId,
        );
        expect(stepB?.attributes['oncely.attempt']).toBe(2);
        const stepC = spans.find((s) => s.attributes['oncely.step'] === 'c');
        const work = spans.find((s) => s.name === 'app.work');
        expect(work?.parentSpanContext?.spanId).toBe(stepC?.spanContext().spanId);
        expect(work?.spanContext().traceId).toBe(okSecond.spanContext().traceId);

        const sagaRuns = runsOf(saga.name);
        expect(sagaRuns.map(attrs)).toEqual([
          [sagaId, 1, 'failed'],
          [sagaId, 2, 'failed'],
        ]);
        const [sagaFirst, sagaSecond] = sagaRuns as [ReadableSpan, ReadableSpan];
        expect(stepsUnder(sagaFirst)).toEqual([
          ['r1', 'executed', false],
          ['r2', 'executed', false],
          ['r3', 'executed', false],
          ['boom', 'failed', false],
          ['compensate:r3', 'executed', false],
          ['compensate:r2', 'failed', false],
          ['compensate:r1', 'executed', false],
        ]);
        expect(stepsUnder(sagaSecond)).toEqual([
          ['r1', 'memoized', true],
          ['r2', 'memoized', true],
          ['r3', 'memoized', true],
          ['boom', 'failed', false],
          ['compensate:r3', 'memoized', true],
          ['compensate:r2', 'failed', false],
          ['compensate:r1', 'memoized', true],
        ]);
        const failedCompensation = spans.find(
          (s) =>
            s.attributes['oncely.step'] === 'compensate:r2' &&
            s.parentSpanContext?.spanId === sagaFirst.spanContext().spanId,
        );
        expect(failedCompensation?.attributes['oncely.compensation']).toBe(true);
        expect(failedCompensation?.status).toMatchObject({ code: 2 });
      } finally {
        await flows.stop();
      }
    }, 60_000);

    it('without observe options flows count into the process metrics', async () => {
      const tag = randomUUID().slice(0, 8);
      const def = defineFlow<{ id: string }, string>(`obs-default-${tag}`, { seed: ['id'] }, async (run) =>
        run.step('only', () => 'x'),
      );
      const flows = await createFlows({ db, flows: [def], poll: '20ms' });
      try {
        await flows.startWorker();
        const { workflowId } = await flows.start(def, { id: 'D1' });
        expect(await flows.result(workflowId, { timeout: '10s' })).toBe('x');
        expect(processMetrics.value('oncely_flows_total', [def.name, 'started'])).toBe(1);
        expect(processMetrics.value('oncely_flows_total', [def.name, 'completed'])).toBe(1);
        expect(processMetrics.value('oncely_flow_steps_total', [def.name, 'executed'])).toBe(1);
      } finally {
        await flows.stop();
      }
    });

    it('with metrics: false and tracer: false nothing is counted or spanned, and the flow still runs', async () => {
      const tag = randomUUID().slice(0, 8);
      const def = defineFlow<{ id: string }, string>(`obs-off-${tag}`, { seed: ['id'] }, async (run) =>
        run.step('only', () => 'x'),
      );
      const flows = await createFlows({ db, flows: [def], poll: '20ms', metrics: false, tracer: false });
      exporter.reset();
      try {
        await flows.startWorker();
        const { workflowId } = await flows.start(def, { id: 'N1' });
        expect(await flows.result(workflowId, { timeout: '10s' })).toBe('x');
        expect(exporter.getFinishedSpans()).toEqual([]);
        expect(processMetrics.sum('oncely_flows_total', { flow: def.name })).toBe(0);
        expect(processMetrics.sum('oncely_flow_steps_total', { flow: def.name })).toBe(0);
      } finally {
        await flows.stop();
      }
    });
  });
}

const schema = freshSchema();
for (const { name, open } of selectStores([
  {
    name: 'sqlite',
    open: async () => ({
      target: join(mkdtempSync(join(tmpdir(), 'oncely-flows-obs-')), 'flows.db'),
      cleanup: async () => {},
    }),
  },
  {
    name: 'postgres',
    open: async () => ({ target: `${POSTGRES_URL}?schema=${schema}`, cleanup: () => dropSchema(schema) }),
  },
] as const))
  describeObserved(name, open);
