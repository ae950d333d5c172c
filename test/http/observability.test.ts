/**
 * Issue 14 on the HTTP middleware (Express, Fastify, Hono, on real sockets): the engine's counts
 * and decisions as surface 'http', the intent's Oncely-Trace-Id kept by the first request and
 * returned on every answer beside each request's own X-Request-Id, and W3C traceparent continuing
 * the caller's trace down to spans the handler starts.
 */
import { mkdtempSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type ServerType, serve } from '@hono/node-server';
import { trace } from '@opentelemetry/api';
import express from 'express';
import Fastify from 'fastify';
import { Hono } from 'hono';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type MetricName, Metrics } from '../../src/core/metrics.js';
import { idempotency as expressIdempotency } from '../../src/express/index.js';
import { idempotency as fastifyIdempotency } from '../../src/fastify/index.js';
import { idempotency as honoIdempotency } from '../../src/hono/index.js';
import { createOncely, type Oncely } from '../../src/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';
import { capture, installTracing } from '../engine/support/observe.js';

/** The middleware's body limit here: small, so a 413 is cheap to provoke. */
const MAX_BODY = 512;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** Every non-zero series of a metric as 'label label label' -> value. */
function table(metrics: Metrics, name: MetricName): Record<string, number> {
  const out: Record<string, number> = {};
  for (const series of metrics.read(name)) if (series.value !== 0) out[series.labels.join(' ')] = series.value;
  return out;
}

/** The handler of every framework: starts a span of its own (to see where it nests), answers 201. */
function handle(body: unknown): { status: number; body: unknown } {
  trace.getTracer('app').startSpan('handler').end();
  return { status: 201, body: { ordered: body } };
}

/** Serves POST /orders behind the framework's middleware on a free port; answers its base URL and a closer. */
type Start = (once: Oncely) => Promise<{ base: string; close: () => Promise<void> }>;

const frameworks: Record<string, Start> = {
  async express(once) {
    const app = express();
    app.use(express.json());
    app.post('/orders', expressIdempotency({ once, maxBodyBytes: MAX_BODY }), (req, res) => {
      const answer = handle(req.body);
      res.status(answer.status).json(answer.body);
    });
    const server = app.listen(0, '127.0.0.1');
    await new Promise<void>((resolve) => server.once('listening', resolve));
    return {
      base: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      close: () =>
        new Promise<void>((resolve) => {
          server.closeAllConnections();
          server.close(() => resolve());
        }),
    };
  },
  async fastify(once) {
    const app = Fastify();
    await app.register(fastifyIdempotency, { once, maxBodyBytes: MAX_BODY });
    app.post('/orders', async (request, reply) => {
      const answer = handle(request.body);
      reply.code(answer.status);
      return answer.body;
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    return {
      base: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`,
      close: () => app.close(),
    };
  },
  async hono(once) {
    const app = new Hono();
    app.use('*', honoIdempotency({ once, maxBodyBytes: MAX_BODY }));
    app.post('/orders', async (c) => {
      const answer = handle(await c.req.json());
      return c.json(answer.body as object, 201);
    });
    let server: ServerType | undefined;
    const port = await new Promise<number>((resolve) => {
      server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, (info) => resolve(info.port));
    });
    return {
      base: `http://127.0.0.1:${port}`,
      close: () => new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve())),
    };
  },
};

const freshStore = () => sqliteStore({ path: join(mkdtempSync(join(tmpdir(), 'oncely-http-observe-')), 'r.db') });

/** Posts JSON to /orders with the given headers; answers status, the headers read here, and the body. */
async function post(base: string, headers: Record<string, string>, body: unknown = { item: 'tea' }) {
  const res = await fetch(`${base}/orders`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return {
    status: res.status,
    traceId: res.headers.get('oncely-trace-id'),
    requestId: res.headers.get('x-request-id'),
    replayed: res.headers.get('idempotent-replayed'),
    body: (await res.json()) as Record<string, unknown>,
  };
}

for (const [name, start] of Object.entries(frameworks)) {
  describe(`${name}: observed through the engine`, () => {
    const metrics = new Metrics();
    const seen = capture();
    let once: Oncely;
    let app: Awaited<ReturnType<Start>>;
    beforeAll(async () => {
      once = await createOncely({
        store: freshStore(),
        metrics,
        logger: seen.logger,
        onDecision: seen.onDecision,
        tracer: false,
      });
      app = await start(once);
    });
    afterAll(async () => {
      await app.close();
      await once.close();
    });

    it("keeps the first request's trace id, answers each request's own request id, counts as surface 'http'", async () => {
      const first = await post(app.base, {
        'idempotency-key': '"k-1"',
        'oncely-trace-id': 'T-1',
        'x-request-id': 'R-1',
      });
      expect(first).toMatchObject({ status: 201, traceId: 'T-1', requestId: 'R-1', replayed: null });
      // A retry with another trace id gets the intent's, and a request id made for it.
      const retry = await post(app.base, { 'idempotency-key': '"k-1"', 'oncely-trace-id': 'T-2' });
      expect(retry).toMatchObject({ status: 201, traceId: 'T-1', replayed: 'true', body: first.body });
      expect(retry.requestId).toMatch(UUID);
      const reused = await post(app.base, { 'idempotency-key': '"k-1"', 'x-request-id': 'R-3' }, { item: 'cake' });
      expect(reused).toMatchObject({ status: 422, traceId: 'T-1', requestId: 'R-3', body: { code: 'KEY_REUSED' } });
      // Without a trace id, a first request's is made by the engine and returned.
      const other = await post(app.base, { 'idempotency-key': '"k-2"' });
      expect(other.status).toBe(201);
      expect(other.traceId).toMatch(UUID);
      expect(other.requestId).toMatch(UUID);
      expect(other.traceId).not.toBe(other.requestId);

      expect(table(metrics, 'oncely_calls_total')).toEqual({
        'http POST /orders executed': 2,
        'http POST /orders replayed': 1,
        'http POST /orders key_reused': 1,
      });
      expect(table(metrics, 'oncely_key_hits_total')).toEqual({ 'http POST /orders': 2 });
      expect(table(metrics, 'oncely_duplicates_total')).toEqual({ 'http POST /orders true': 1 });
      expect(seen.events.map((e) => [e.surface, e.action, e.decision, e.key, e.traceId, e.requestId])).toEqual([
        ['http', 'POST /orders', 'executed', 'k-1', 'T-1', 'R-1'],
        ['http', 'POST /orders', 'replayed', 'k-1', 'T-1', retry.requestId],
        ['http', 'POST /orders', 'key_reused', 'k-1', 'T-1', 'R-3'],
        ['http', 'POST /orders', 'executed', 'k-2', other.traceId, other.requestId],
      ]);
      expect(seen.lines.map((l) => [l.level, l.message, l.fields.traceId, l.fields.requestId])).toEqual([
        ['info', 'oncely http replayed', 'T-1', retry.requestId],
        ['warn', 'oncely http key_reused', 'T-1', 'R-3'],
      ]);
    });

    it('answers the ids on refusals before the engine too, and refuses malformed ids with 400 TRACE_ID_INVALID', async () => {
      const before = seen.events.length;
      const missing = await post(app.base, { 'oncely-trace-id': 'T-9', 'x-request-id': 'R-9' });
      expect(missing).toMatchObject({ status: 400, traceId: 'T-9', requestId: 'R-9', body: { code: 'KEY_REQUIRED' } });
      const made = await post(app.base, {});
      expect(made).toMatchObject({ status: 400, traceId: null, body: { code: 'KEY_REQUIRED' } });
      expect(made.requestId).toMatch(UUID);
      const malformed: Record<string, string>[] = [
        { 'oncely-trace-id': 'has space' },
        { 'oncely-trace-id': 'x'.repeat(129) },
        { 'oncely-trace-id': 'é' },
        { 'x-request-id': 'x'.repeat(129) },
      ];
      for (const headers of malformed) {
        const refused = await post(app.base, { 'idempotency-key': '"k-3"', ...headers });
        expect(refused).toMatchObject({ status: 400, traceId: null, body: { code: 'TRACE_ID_INVALID' } });
        expect(refused.requestId).toMatch(UUID);
      }
      // Too large, refused on its Content-Length before it is read: with the ids all the same.
      const large = await post(
        app.base,
        { 'idempotency-key': '"k-4"', 'oncely-trace-id': 'T-5', 'x-request-id': 'R-5' },
        { item: 'x'.repeat(MAX_BODY) },
      );
      expect(large).toMatchObject({
        status: 413,
        traceId: 'T-5',
        requestId: 'R-5',
        body: { code: 'REQUEST_TOO_LARGE' },
      });
      // 128 printable characters are an id.
      const longest = await post(app.base, { 'idempotency-key': '"k-3"', 'oncely-trace-id': 't'.repeat(128) });
      expect(longest).toMatchObject({ status: 201, traceId: 't'.repeat(128) });
      // The refusals never reached the engine: only the last request is a call.
      expect(seen.events.slice(before).map((e) => e.decision)).toEqual(['executed']);
    });
  });
}

describe('traceparent continues the caller trace', () => {
  let tracing: ReturnType<typeof installTracing>;
  beforeAll(() => {
    tracing = installTracing();
  });
  afterAll(() => {
    tracing.uninstall();
  });

  for (const [name, start] of Object.entries(frameworks)) {
    it(`${name}: the engine's span is a child of the caller's, the handler's span a child of oncely.execute`, async () => {
      const once = await createOncely({ store: freshStore(), metrics: false });
      const app = await start(once);
      tracing.exporter.reset();
      const traceId = '0af7651916cd43dd8448eb211c80319c';
      const first = await post(app.base, {
        'idempotency-key': '"k-1"',
        traceparent: `00-${traceId}-b7ad6b7169203331-01`,
      });
      expect(first.status).toBe(201);
      const replay = await post(app.base, {
        'idempotency-key': '"k-1"',
        traceparent: `00-${traceId}-00f067aa0ba902b7-01`,
      });
      expect(replay.replayed).toBe('true');
      await app.close();
      await once.close();

      const spans = tracing.exporter.getFinishedSpans();
      const byName = (n: string) => spans.filter((s) => s.name === n);
      expect(spans.map((s) => s.name).sort()).toEqual(['handler', 'oncely.execute', 'oncely.replay']);
      const [execute] = byName('oncely.execute');
      const [handler] = byName('handler');
      const [replayed] = byName('oncely.replay');
      expect(execute?.spanContext().traceId).toBe(traceId);
      expect(execute?.parentSpanContext?.spanId).toBe('b7ad6b7169203331');
      expect(execute?.attributes).toMatchObject({
        'oncely.surface': 'http',
        'oncely.action': 'POST /orders',
        'oncely.outcome': 'executed',
        'oncely.trace_id': first.traceId,
      });
      expect(handler?.spanContext().traceId).toBe(traceId);
      expect(handler?.parentSpanContext?.spanId).toBe(execute?.spanContext().spanId);
      expect(replayed?.spanContext().traceId).toBe(traceId);
      expect(replayed?.parentSpanContext?.spanId).toBe('00f067aa0ba902b7');
      expect(replayed?.attributes).toMatchObject({ 'oncely.outcome': 'replayed', 'oncely.trace_id': first.traceId });
    });
  }
});
