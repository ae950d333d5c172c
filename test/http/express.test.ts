import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import express, { type Express } from 'express';
import { inject } from 'light-my-request';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../../examples/express.js';
import { idempotency } from '../../src/express/index.js';
import { createOncely, type Oncely } from '../../src/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';
import { until } from '../support/wait.js';
import { isolate, serve } from './express-serve.js';
import { describeHttpSuite, type HttpHarness } from './suite.js';

const harness: HttpHarness = {
  async start({ once, listen, middleware }) {
    const { app, calls } = createApp({ once, idempotency: middleware });
    return { ...(await serve(app, listen)), calls };
  },
};

describeHttpSuite('express', harness);

// sleep: the helper for the one wait whose duration is the point, a lease passing.
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const post = (key: string, body: unknown = {}) => ({
  method: 'POST',
  headers: { 'content-type': 'application/json', 'idempotency-key': key },
  body: JSON.stringify(body),
});

describe('express specifics', () => {
  const dir = mkdtempSync(join(tmpdir(), 'oncely-express-'));
  let once: Oncely;
  const servers: { close(): Promise<void> }[] = [];
  beforeAll(async () => {
    once = await createOncely({ store: sqliteStore({ path: join(dir, 'express.db') }) });
  });
  afterAll(async () => {
    for (const server of servers) await server.close();
    await once.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const listen = async (app: Express) => {
    const running = await serve(app, true);
    servers.push(running);
    return running;
  };

  it('stores the answer of a handler whose client left, so the retry gets it instead of a second run', async () => {
    const { app, calls } = createApp({ once });
    const { base } = await listen(app);
    const aborted = new AbortController();
    const first = fetch(`${base}/slow`, { ...post('gone-1'), signal: aborted.signal });
    await until('the first /slow request to reach its handler', () => calls.get('/slow gone-1') === 1);
    aborted.abort();
    await expect(first).rejects.toThrow();
    // Until the handler has answered, a retry is refused (409) without running it.
    const retry = await until(
      'the retry to get the stored answer',
      () => fetch(`${base}/slow`, post('gone-1')),
      (answer) => answer.status !== 409,
    );
    expect(retry.status).toBe(200);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(await retry.json()).toEqual({ done: true, n: 1 });
    expect(calls.get('/slow gone-1')).toBe(1);
  });

  it('releases the key of a handler that never answers once its client left and a lease passed', async () => {
    let runs = 0;
    const app = express();
    app.use(express.json());
    app.post('/hang', idempotency({ once, lease: 200 }), () => {
      runs++;
    });
    const { base } = await listen(app);
    const aborted = new AbortController();
    const first = fetch(`${base}/hang`, { ...post('hang-1'), signal: aborted.signal });
    await until('the first /hang request to reach its handler', () => runs === 1);
    aborted.abort();
    await expect(first).rejects.toThrow();
    expect((await fetch(`${base}/hang`, post('hang-1'))).status).toBe(409);
    // sleep: the 200 ms lease must pass before the key is released.
    await sleep(400);
    const retry = new AbortController();
    const second = fetch(`${base}/hang`, { ...post('hang-1'), signal: retry.signal });
    await until('the retry to run the handler again', () => runs === 2);
    retry.abort();
    await expect(second).rejects.toThrow();
    expect(runs).toBe(2);
  });

  it("produces a 500 through Express's own error handler after next(err), and releases the key", async () => {
    let runs = 0;
    const app = express();
    app.use(express.json());
    app.post('/fail', idempotency({ once }), (_req, _res, next) => {
      runs++;
      next(new Error('downstream failed'));
    });
    const { base } = await listen(app);
    const first = await fetch(`${base}/fail`, post('fail-1'));
    expect(first.status).toBe(500);
    expect(first.headers.get('content-type')).toMatch(/^text\/html/);
    expect((await fetch(`${base}/fail`, post('fail-1'))).status).toBe(500);
    expect(runs).toBe(2);
  });

  it('passes an error thrown by a tenant function to next(err) without running the handler', async () => {
    let runs = 0;
    const app = express();
    app.use(express.json());
    const failing = idempotency({
      once,
      tenant: () => {
        throw new Error('tenant lookup failed');
      },
    });
    app.post('/t', failing, (_req, res) => {
      runs++;
      res.json({ ok: true });
    });
    app.use((error: Error, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
      res.status(500).json({ caught: error.message });
    });
    const res = await inject(isolate(app), { method: 'POST', url: '/t', headers: post('t-1').headers, payload: '{}' });
    expect([res.statusCode, res.json()]).toEqual([500, { caught: 'tenant lookup failed' }]);
    expect(runs).toBe(0);
  });

  it('keeps the response a handler ended even when an error handler writes over it afterwards', async () => {
    let runs = 0;
    const app = express();
    app.use(express.json());
    app.post('/late', idempotency({ once }), async (_req, res) => {
      runs++;
      res.status(201).json({ created: runs });
      throw new Error('after the response');
    });
    // An error handler that forgets to check res.headersSent, as many do.
    app.use((_error: Error, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
      res.status(500).json({ error: 'internal', padding: 'x'.repeat(100) });
    });
    const first = await inject(isolate(app), {
      method: 'POST',
      url: '/late',
      headers: post('late-1').headers,
      payload: '{}',
    });
    expect([first.statusCode, first.payload]).toEqual([201, '{"created":1}']);
    expect(first.headers['content-length']).toBe('13');
    const again = await inject(isolate(app), {
      method: 'POST',
      url: '/late',
      headers: post('late-1').headers,
      payload: '{}',
    });
    expect([again.statusCode, again.payload, again.headers['idempotent-replayed']]).toEqual([
      201,
      '{"created":1}',
      'true',
    ]);
    expect(runs).toBe(1);
  });

  it('holds res.write chunks and writeHead headers until the record is written, then sends them whole', async () => {
    const app = express();
    app.use(express.json());
    app.post('/chunks', idempotency({ once, replayHeaders: ['content-type', 'x-batch'] }), (_req, res) => {
      res.setHeader('content-type', 'text/plain');
      res.writeHead(202, { 'x-batch': 'b7' });
      expect(res.headersSent).toBe(true);
      res.write('one,');
      res.write(Buffer.from('two,'));
      res.end('three', 'utf8');
    });
    const { base } = await listen(app);
    const first = await fetch(`${base}/chunks`, post('chunks-1'));
    expect([first.status, first.headers.get('x-batch'), await first.text()]).toEqual([202, 'b7', 'one,two,three']);
    expect(first.headers.get('idempotency-expires')).toMatch(/GMT$/);
    const again = await fetch(`${base}/chunks`, post('chunks-1'));
    expect([again.status, again.headers.get('x-batch'), await again.text()]).toEqual([202, 'b7', 'one,two,three']);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
  });

  it('passes an event stream through as it is written, and a write-by-write body once it passes maxBodyBytes', async () => {
    let firstSeen!: () => void;
    const seen = new Promise<void>((resolve) => {
      firstSeen = resolve;
    });
    const app = express();
    app.use(express.json());
    app.post('/events', idempotency({ once }), async (_req, res) => {
      res.setHeader('content-type', 'text/event-stream');
      res.flushHeaders();
      res.write('data: first\n\n');
      // Only a client that already received the first event lets the handler go on.
      await seen;
      res.end('data: last\n\n');
    });
    app.post('/chatty', idempotency({ once, maxBodyBytes: 10 }), (_req, res) => {
      res.type('text/plain');
      for (let i = 0; i < 5; i++) res.write(`line ${i}\n`);
      res.end('done');
    });
    const { base } = await listen(app);
    const res = await fetch(`${base}/events`, post('events-1'));
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const decoder = new TextDecoder();
    let text = decoder.decode((await reader.read()).value);
    expect(text).toBe('data: first\n\n');
    firstSeen();
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) text += decoder.decode(chunk.value);
    expect(text).toBe('data: first\n\ndata: last\n\n');
    const replay = await fetch(`${base}/events`, post('events-1'));
    expect([replay.status, (await replay.json()).code]).toEqual([409, 'RESPONSE_NOT_STORED']);
    const chatty = await fetch(`${base}/chatty`, post('chatty-1'));
    expect(await chatty.text()).toBe('line 0\nline 1\nline 2\nline 3\nline 4\ndone');
    const again = await fetch(`${base}/chatty`, post('chatty-1'));
    expect([again.status, (await again.json()).code]).toEqual([409, 'RESPONSE_NOT_STORED']);
  });

  it('scopes keys by concrete path when mounted app-wide, where the route pattern is not known yet', async () => {
    let runs = 0;
    const app = express();
    app.use(express.json());
    app.use('/api', idempotency({ once }));
    app.post('/api/items/:id', (req, res) => {
      runs++;
      res.json({ id: req.params.id, runs });
    });
    const a = await inject(isolate(app), {
      method: 'POST',
      url: '/api/items/1',
      headers: post('wide-1').headers,
      payload: '{}',
    });
    const b = await inject(isolate(app), {
      method: 'POST',
      url: '/api/items/2',
      headers: post('wide-1').headers,
      payload: '{}',
    });
    const a2 = await inject(isolate(app), {
      method: 'POST',
      url: '/api/items/1',
      headers: post('wide-1').headers,
      payload: '{}',
    });
    expect([a.json(), b.json(), a2.json()]).toEqual([
      { id: '1', runs: 1 },
      { id: '2', runs: 2 },
      { id: '1', runs: 1 },
    ]);
    expect(await once.get('POST /api/items/1', 'wide-1')).toMatchObject({ state: 'succeeded' });
    expect(await once.get('POST /orders/:id/charge', 'wide-1')).toBeNull();
  });

  it('names the action by route pattern when mounted on a route, including a router base path', async () => {
    const app = express();
    app.use(express.json());
    const router = express.Router();
    router.post('/orders/:id/charge', idempotency({ once }), (req, res) => {
      res.json({ id: req.params.id });
    });
    app.use('/v1', router);
    const res = await inject(isolate(app), {
      method: 'POST',
      url: '/v1/orders/o1/charge',
      headers: post('route-1').headers,
      payload: '{}',
    });
    expect(res.statusCode).toBe(200);
    expect(await once.get('POST /v1/orders/:id/charge', 'route-1')).toMatchObject({ state: 'succeeded' });
  });

  it('never stores a request the body parser rejected', async () => {
    const { app, calls } = createApp({ once });
    const bad = await inject(isolate(app), {
      method: 'POST',
      url: '/orders',
      headers: post('parse-1').headers,
      payload: '{"item":',
    });
    expect(bad.statusCode).toBe(400);
    expect(await once.get('POST /orders', 'parse-1')).toBeNull();
    const good = await inject(isolate(app), {
      method: 'POST',
      url: '/orders',
      headers: post('parse-1').headers,
      payload: '{"item":"tea","amount":1}',
    });
    expect(good.statusCode).toBe(201);
    expect(calls.get('/orders parse-1')).toBe(1);
  });
});
