/**
 * Agent tools observed, on SQLite and PostgreSQL: a known mix (calls sent and replayed, a failure
 * that releases its credits and a retry that charges them, approvals requested, approved, rejected
 * and expired, the sweep, an unknown tool) counted exactly into a fresh Metrics shared with the
 * engine; a caller's trace and request ids kept through the engine; spans of tool calls with the
 * engine's span as a child; the engine's decisions as log lines and hook events.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { type AgentRuntime, createAgentRuntime, defineTool, type ToolEnvelope } from '../../src/agent/index.js';
import { META_TRACE_ID, registerTools } from '../../src/agent/mcp.js';
import { type MetricName, Metrics } from '../../src/core/metrics.js';
import type { DecisionEvent } from '../../src/core/observer.js';
import { openDb } from '../../src/db/index.js';
import type { Db } from '../../src/db/types.js';
import { createOncely, type Oncely } from '../../src/index.js';
import { postgresStore } from '../../src/postgres/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';
import type { RecordStore } from '../../src/store.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { SELECTED_STORES, type StoreName } from '../support/store-filter.js';

// sleep: the helper for the one wait whose duration is the point, an approval running out.
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const TENANT = 'acme';

/** Every counted series of a counter as [labels..., value], sorted: the whole metric, nothing left out. */
function seriesOf(metrics: Metrics, name: MetricName): (string | number)[][] {
  return metrics
    .read(name)
    .filter((s) => s.value > 0)
    .map((s) => [...s.labels, s.value])
    .sort((a, b) => a.join().localeCompare(b.join()));
}

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const contextManager = new AsyncLocalStorageContextManager();
beforeAll(() => {
  context.setGlobalContextManager(contextManager.enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
});
afterAll(() => {
  propagation.disable();
  context.disable();
});

const noticeInput = z.object({ taskId: z.string(), to: z.string(), body: z.string() });

function tools(sent: string[], failOnce: { armed: boolean }) {
  return [
    defineTool({
      name: 'notice',
      description: 'Sends a notice.',
      input: noticeInput,
      idempotency: { keyFields: ['taskId', 'to'], ttl: 'permanent' },
      cost: { credits: 1, account: (ctx) => ctx.tenant },
      execute: (input) => {
        sent.push(`notice ${input.taskId}`);
        return { ok: true };
      },
    }),
    defineTool({
      name: 'flaky',
      description: 'Fails on its first try.',
      input: noticeInput,
      idempotency: { keyFields: ['taskId'], ttl: 'permanent' },
      cost: { credits: 2, account: (ctx) => ctx.tenant },
      execute: (input) => {
        if (failOnce.armed) {
          failOnce.armed = false;
          throw new Error('SMTP 451');
        }
        sent.push(`flaky ${input.taskId}`);
        return { ok: true };
      },
    }),
    defineTool({
      name: 'approved',
      description: 'Sends once a person approved it.',
      input: noticeInput,
      idempotency: { keyFields: ['taskId'], ttl: 'permanent' },
      outbound: { preview: (i) => ({ to: i.to, body: i.body }), approval: 'required' },
      execute: (input) => {
        sent.push(`approved ${input.taskId}`);
        return { ok: true };
      },
    }),
    defineTool({
      name: 'expiring',
      description: 'An approval that lapses at once.',
      input: noticeInput,
      idempotency: { keyFields: ['taskId'], ttl: 'permanent' },
      outbound: { preview: (i) => ({ to: i.to, body: i.body }), approval: 'required', approvalTtl: '30ms' },
      execute: () => ({ ok: true }),
    }),
  ];
}

function describeObserved(name: string, open: () => Promise<{ store: RecordStore; db: Db; cleanup(): Promise<void> }>) {
  // A store ONCELY_STORES leaves out registers nothing.
  if (!SELECTED_STORES.has(name as StoreName)) return;
  describe(`agent observed: ${name}`, () => {
    let once: Oncely;
    let db: Db;
    let cleanup: () => Promise<void>;
    let agent: AgentRuntime;
    const metrics = new Metrics();
    const lines: { level: string; fields: Record<string, unknown>; message: string }[] = [];
    const line = (level: string) => (fields: Record<string, unknown>, message: string) =>
      void lines.push({ level, fields, message });
    const logger = { info: line('info'), warn: line('warn'), error: line('error') };
    const events: DecisionEvent[] = [];
    const sent: string[] = [];
    const failOnce = { armed: true };

    beforeAll(async () => {
      const opened = await open();
      db = opened.db;
      cleanup = opened.cleanup;
      const tracer = provider.getTracer('oncely');
      const observe = { metrics, logger, onDecision: (e: DecisionEvent) => void events.push(e), tracer };
      once = await createOncely({ store: opened.store, ...observe });
      agent = await createAgentRuntime({ once, db, tools: tools(sent, failOnce), tenant: TENANT, ...observe });
      await agent.credits.grant(TENANT, 100);
    });
    afterAll(async () => {
      await once?.close();
      await db?.close();
      await cleanup?.();
    });

    it('counts every envelope, approval and credit exactly; ids reach the engine; spans nest; decisions are logged', async () => {
      exporter.reset();
      const A = { taskId: 'T-A', to: 'u-1', body: 'a' };
      const B = { taskId: 'T-B', to: 'u-1', body: 'b' };
      expect((await agent.call('notice', A)).deliveryState).toBe('sent');
      expect((await agent.call('notice', A)).deliveryState).toBe('already_sent');
      // The caller's ids: the first claim keeps the trace id, each attempt has its own request id.
      const b1 = await agent.call('notice', B, { traceId: 'trace-agent-1', requestId: 'req-1' });
      expect(b1).toMatchObject({ deliveryState: 'sent', traceId: 'trace-agent-1', requestId: 'req-1' });
      const b2 = await agent.call('notice', B, { traceId: 'trace-other', requestId: 'req-2' });
      expect(b2).toMatchObject({ deliveryState: 'already_sent', traceId: 'trace-agent-1', requestId: 'req-2' });

      const F = { taskId: 'T-F', to: 'u-2', body: 'f' };
      const f1 = await agent.call('flaky', F, { traceId: 'trace-flaky' });
      // A failed execution still tells the intent's trace id.
      expect(f1).toMatchObject({ deliveryState: 'failed', traceId: 'trace-flaky', error: { code: 'TOOL_FAILED' } });
      expect((await agent.call('flaky', F)).deliveryState).toBe('sent');

      const X = { taskId: 'T-X', to: 'u-3', body: 'x' };
      const x1 = await agent.call('approved', X);
      expect(x1.deliveryState).toBe('pending_approval');
      expect(
        (await agent.approve(x1.approvalId as string, { approver: 'alice', requestId: 'req-approve' })).deliveryState,
      ).toBe('sent');
      expect((await agent.call('approved', X)).deliveryState).toBe('already_sent');
      const Y = { taskId: 'T-Y', to: 'u-3', body: 'y' };
      const y1 = await agent.call('approved', Y);
      expect(y1.deliveryState).toBe('pending_approval');
      expect((await agent.reject(y1.approvalId as string, { approver: 'bob', reason: 'tone' })).deliveryState).toBe(
        'rejected',
      );
      const Z = { taskId: 'T-Z', to: 'u-4', body: 'z' };
      expect((await agent.call('expiring', Z)).deliveryState).toBe('pending_approval');
      // sleep: the expiring tool's approval TTL must run out.
      await sleep(60);
      expect(await agent.call('expiring', Z)).toMatchObject({
        deliveryState: 'rejected',
        error: { code: 'APPROVAL_EXPIRED' },
      });

      // An abandoned reservation made outside any tool, released by the sweep.
      await agent.credits.reserve(TENANT, 3, 'abandoned-action', Date.now() - 1);
      expect(await agent.credits.sweep()).toBe(1);
      expect((await agent.call('nope', {})).error?.code).toBe('TOOL_UNKNOWN');
      await expect(agent.call('notice', A, { traceId: 'has space' })).rejects.toMatchObject({
        code: 'TRACE_ID_INVALID',
      });
      expect(sent).toEqual(['notice T-A', 'notice T-B', 'flaky T-F', 'approved T-X']);

      expect(seriesOf(metrics, 'oncely_tool_calls_total')).toEqual([
        ['', 'failed', 1],
        ['approved', 'already_sent', 1],
        ['approved', 'pending_approval', 2],
        ['approved', 'rejected', 1],
        ['approved', 'sent', 1],
        ['expiring', 'pending_approval', 1],
        ['expiring', 'rejected', 1],
        ['flaky', 'failed', 1],
        ['flaky', 'sent', 1],
        ['notice', 'already_sent', 2],
        ['notice', 'sent', 2],
      ]);
      expect(seriesOf(metrics, 'oncely_approvals_total')).toEqual([
        ['approved', 'approved', 1],
        ['approved', 'rejected', 1],
        ['approved', 'requested', 2],
        ['expiring', 'expired', 1],
        ['expiring', 'requested', 1],
      ]);
      expect(seriesOf(metrics, 'oncely_credits_total')).toEqual([
        ['', 'released', 1],
        ['', 'reserved', 1],
        ['flaky', 'confirmed', 1],
        ['flaky', 'released', 1],
        ['flaky', 'reserved', 2],
        ['notice', 'confirmed', 2],
        ['notice', 'reserved', 2],
      ]);
      // The engine counted the same calls under the surface 'tool'.
      expect(seriesOf(metrics, 'oncely_calls_total')).toEqual([
        ['tool', 'tool:approved', 'executed', 1],
        ['tool', 'tool:approved', 'replayed', 1],
        ['tool', 'tool:flaky', 'executed', 1],
        ['tool', 'tool:flaky', 'released', 1],
        ['tool', 'tool:notice', 'executed', 2],
        ['tool', 'tool:notice', 'replayed', 2],
      ]);
      expect(await agent.credits.balance(TENANT)).toBe(100 - 2 - 2 - 0);

      // The engine's decisions carry the caller's ids: the hook gets every one, the logger the replays.
      const engineEvents = events.map((e) => [e.decision, e.surface, e.action, e.traceId ?? null, e.requestId]);
      expect(engineEvents).toEqual([
        ['executed', 'tool', 'tool:notice', expect.any(String), expect.any(String)],
        ['replayed', 'tool', 'tool:notice', expect.any(String), expect.any(String)],
        ['executed', 'tool', 'tool:notice', 'trace-agent-1', 'req-1'],
        ['replayed', 'tool', 'tool:notice', 'trace-agent-1', 'req-2'],
        ['released', 'tool', 'tool:flaky', expect.any(String), expect.any(String)],
        ['executed', 'tool', 'tool:flaky', expect.any(String), expect.any(String)],
        ['executed', 'tool', 'tool:approved', expect.any(String), 'req-approve'],
        ['replayed', 'tool', 'tool:approved', expect.any(String), expect.any(String)],
      ]);
      expect(lines.map((l) => [l.level, l.message, l.fields.action, l.fields.requestId])).toEqual([
        ['info', 'oncely tool replayed', 'tool:notice', expect.any(String)],
        ['info', 'oncely tool replayed', 'tool:notice', 'req-2'],
        ['info', 'oncely tool replayed', 'tool:approved', expect.any(String)],
      ]);
      expect(lines[1]?.fields).toMatchObject({ traceId: 'trace-agent-1', key: 'notice:T-B:u-1', tenant: TENANT });

      // One span per runtime operation; the engine's span of each execution or replay under it.
      const spans = exporter.getFinishedSpans();
      const toolSpans = spans.filter((s) => s.name === 'oncely.tool');
      expect(toolSpans).toHaveLength(14);
      expect(metrics.sum('oncely_tool_calls_total')).toBe(14);
      const childrenOf = (parent: ReadableSpan) =>
        spans.filter((s) => s.parentSpanContext?.spanId === parent.spanContext().spanId).map((s) => s.name);
      const spanOf = (requestId: string) => {
        const found = toolSpans.find((s) => s.attributes['oncely.request_id'] === requestId);
        if (!found) throw new Error(`no span of ${requestId}`);
        return found;
      };
      const first = spanOf('req-1');
      expect(first.attributes).toMatchObject({
        'oncely.tool': 'notice',
        'oncely.operation': 'call',
        'oncely.state': 'sent',
        'oncely.trace_id': 'trace-agent-1',
      });
      expect(childrenOf(first)).toEqual(['oncely.execute']);
      const engineSpan = spans.find((s) => s.parentSpanContext?.spanId === first.spanContext().spanId);
      expect(engineSpan?.attributes).toMatchObject({ 'oncely.trace_id': 'trace-agent-1', 'oncely.surface': 'tool' });
      expect(childrenOf(spanOf('req-2'))).toEqual(['oncely.replay']);
      expect(spanOf('req-approve').attributes).toMatchObject({ 'oncely.operation': 'approve', 'oncely.state': 'sent' });
      expect(childrenOf(spanOf('req-approve'))).toEqual(['oncely.execute']);
      // Calls that never reach the engine have no child; a failed one is an error span.
      const pending = toolSpans.filter((s) => s.attributes['oncely.state'] === 'pending_approval');
      expect(pending).toHaveLength(3);
      expect(pending.flatMap(childrenOf)).toEqual([]);
      const unknown = toolSpans.find((s) => s.attributes['oncely.tool'] === '');
      expect(unknown?.status).toMatchObject({ code: 2, message: 'there is no tool named nope' });
    });

    it("MCP: _meta's trace id reaches the engine and comes back in the envelope; its traceparent continues the client's trace", async () => {
      const server = new McpServer({ name: 'oncely-obs', version: '1.0.0' });
      registerTools(server, tools(sent, failOnce), { runtime: agent, tenant: TENANT });
      const client = new Client({ name: 'obs-client', version: '1.0.0' });
      const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
      await Promise.all([server.connect(serverSide), client.connect(clientSide)]);
      try {
        exporter.reset();
        const before = metrics.value('oncely_tool_calls_total', ['notice', 'sent']);
        const caller = provider.getTracer('client').startSpan('client.turn');
        const carrier: Record<string, string> = {};
        propagation.inject(trace.setSpan(context.active(), caller), carrier);
        const args = { taskId: 'T-M', to: 'u-9', body: 'm' };
        const callTool = async (meta: Record<string, unknown>) =>
          (await client.callTool({ name: 'notice', arguments: args, _meta: meta }))
            .structuredContent as unknown as ToolEnvelope;
        const first = await callTool({ ...carrier, [META_TRACE_ID]: 'trace-mcp-1' });
        caller.end();
        expect(first).toMatchObject({ deliveryState: 'sent', traceId: 'trace-mcp-1' });
        const retry = await callTool({ [META_TRACE_ID]: 'trace-mcp-2' });
        expect(retry).toMatchObject({ deliveryState: 'already_sent', traceId: 'trace-mcp-1' });
        const bad = await callTool({ [META_TRACE_ID]: 'with space' });
        expect(bad).toMatchObject({ deliveryState: 'failed', error: { code: 'TRACE_ID_INVALID' } });
        expect(metrics.value('oncely_tool_calls_total', ['notice', 'sent'])).toBe(before + 1);

        const spans = exporter.getFinishedSpans();
        const toolSpans = spans.filter((s) => s.name === 'oncely.tool');
        expect(toolSpans).toHaveLength(2);
        const [continued, fresh] = toolSpans as [ReadableSpan, ReadableSpan];
        expect(continued.parentSpanContext?.spanId).toBe(caller.spanContext().spanId);
        expect(continued.spanContext().traceId).toBe(caller.spanContext().traceId);
        expect(fresh.spanContext().traceId).not.toBe(caller.spanContext().traceId);
        const execute = spans.find((s) => s.name === 'oncely.execute');
        expect(execute?.parentSpanContext?.spanId).toBe(continued.spanContext().spanId);
      } finally {
        await client.close();
        await server.close();
      }
    });
  });
}

describeObserved('sqlite', async () => {
  const path = join(mkdtempSync(join(tmpdir(), 'oncely-agent-obs-')), 'agent.db');
  return { store: sqliteStore({ path }), db: await openDb(path), cleanup: async () => {} };
});

describeObserved('postgres', async () => {
  const schema = freshSchema();
  return {
    store: postgresStore({ connectionString: POSTGRES_URL, schema }),
    db: await openDb(`${POSTGRES_URL}?schema=${schema}`),
    cleanup: () => dropSchema(schema),
  };
});
