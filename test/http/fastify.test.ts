import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import Fastify, { type FastifyInstance, type HTTPMethods } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../../examples/fastify.js';
import { type FastifyIdempotencyOptions, idempotency } from '../../src/fastify/index.js';
import { createOncely, type Oncely, type RecordStore } from '../../src/index.js';
import { postgresStore } from '../../src/postgres/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { until } from '../support/wait.js';
import { postChunked } from './bodies.js';
import { describeHttpSuite, type HttpHarness, type SuiteResponse } from './suite.js';

async function read(res: Response): Promise<SuiteResponse> {
  const headers: Record<string, string> = {};
  res.headers.forEach((value, name) => {
    headers[name] = value;
  });
  return { status: res.status, headers, body: await res.text() };
}

/** Listens on a free port and returns the base URL. */
async function listen(app: FastifyInstance): Promise<string> {
  await app.listen({ port: 0, host: '127.0.0.1' });
  const address = app.server.address();
  if (address === null || typeof address === 'string') throw new Error('no port');
  return `http://127.0.0.1:${address.port}`;
}

const harness: HttpHarness = {
  async start({ once, listen: listening, middleware }) {
    const { app, calls } = createApp({ once, idempotency: middleware as Partial<FastifyIdempotencyOptions> });
    const base = listening ? await listen(app) : '';
    if (!listening) await app.ready();
    return {
      calls,
      async request({ method, path, headers, body }) {
        const payload = body === undefined ? undefined : JSON.stringify(body);
        if (listening) return read(await fetch(`${base}${path}`, { method, headers, body: payload }));
        const res = await app.inject({ method: method as HTTPMethods, url: path, headers, payload });
        const flat: Record<string, string> = {};
        for (const [name, value] of Object.entries(res.headers))
          if (value !== undefined) flat[name] = Array.isArray(value) ? value.join(', ') : String(value);
        return { status: res.statusCode, headers: flat, body: res.body };
      },
      close: () => app.close(),
    };
  },
};

describeHttpSuite('fastify', harness);

// What only Fastify can get wrong: its own rejections before preHandler, scopes, 404s, clients that leave.
const schema = freshSchema();
const backends: [string, () => RecordStore][] = [
  ['sqlite', () => sqliteStore({ path: join(mkdtempSync(join(tmpdir(), 'oncely-fastify-')), 'fastify.db') })],
  ['postgres', () => postgresStore({ connectionString: POSTGRES_URL, schema })],
];
afterAll(() => dropSchema(schema));
let unique = 0;
const fresh = (label: string) => `${label}-${process.pid}-${Date.now()}-${++unique}`;
const json = { 'content-type': 'application/json' };

for (const [backend, makeStore] of backends)
  describe(`fastify specifics on ${backend}`, () => {
    let once: Oncely;
    const apps: FastifyInstance[] = [];
    beforeAll(async () => {
      once = await createOncely({ store: makeStore() });
    });
    afterAll(async () => {
      for (const app of apps) await app.close();
      await once.close();
    });
    const example = async (extra: Partial<FastifyIdempotencyOptions> = {}) => {
      const made = createApp({ once, idempotency: extra });
      apps.push(made.app);
      await made.app.ready();
      return made;
    };
    const post = (app: FastifyInstance, url: string, key: string, payload: string) =>
      app.inject({ method: 'POST', url, headers: { ...json, 'idempotency-key': key }, payload });

    it("never stores Fastify's own 413 (bodyLimit) or 400 (unparsable body): the key stays free", async () => {
      const { app, calls } = await example();
      const key = fresh('limit');
      const huge = await post(app, '/orders', key, JSON.stringify({ item: 'x'.repeat(2 * 1024 * 1024), amount: 1 }));
      expect(huge.statusCode).toBe(413);
      const broken = await post(app, '/orders', key, '{"item": ');
      expect(broken.statusCode).toBe(400);
      expect(broken.headers['content-type']).not.toMatch(/problem/);
      const ok = await post(app, '/orders', key, JSON.stringify({ item: 'tea', amount: 1 }));
      expect([ok.statusCode, ok.headers['idempotent-replayed']]).toEqual([201, undefined]);
      expect(calls.get(`/orders ${key}`)).toBe(1);
    });

    it('leaves 404s and uncovered methods alone, and covers only the scope it is registered in', async () => {
      const { app } = await example();
      const missing = await app.inject({ method: 'POST', url: '/nowhere', headers: json, payload: '{}' });
      expect(missing.statusCode).toBe(404);
      const scoped = Fastify();
      apps.push(scoped);
      scoped.post('/open', async () => ({ open: true }));
      scoped.register(async (child) => {
        child.register(idempotency, { once });
        child.post('/guarded', async () => ({ guarded: true }));
      });
      expect((await scoped.inject({ method: 'POST', url: '/open', headers: json, payload: '{}' })).statusCode).toBe(
        200,
      );
      const guarded = await scoped.inject({ method: 'POST', url: '/guarded', headers: json, payload: '{}' });
      expect([guarded.statusCode, guarded.json().code]).toEqual([400, 'KEY_REQUIRED']);
    });

    it('stores what the handler answers after its client left: the retry gets the missed response, not a second run', async () => {
      const { app, calls } = await example();
      const base = await listen(app);
      const key = fresh('timeout');
      const init = { method: 'POST', headers: { ...json, 'idempotency-key': key }, body: '{}' };
      const left = new AbortController();
      const first = fetch(`${base}/slow`, { ...init, signal: left.signal });
      await until('the first /slow request to reach its handler', () => calls.get(`/slow ${key}`) === 1);
      left.abort();
      await expect(first).rejects.toThrow();
      // Until the handler has answered, a retry is refused (409) without running it.
      const retry = await until(
        'the retry to get the stored answer',
        async () => read(await fetch(`${base}/slow`, init)),
        (answer) => answer.status !== 409,
      );
      expect([retry.status, retry.headers['idempotent-replayed'], JSON.parse(retry.body).n]).toEqual([200, 'true', 1]);
      expect(calls.get(`/slow ${key}`)).toBe(1);
    });

    it('releases the key of a request whose client left and whose handler never answered, after one lease', async () => {
      const app = Fastify();
      apps.push(app);
      let runs = 0;
      app.register(idempotency, { once, lease: '300ms' });
      app.post('/silent', async (_req, reply) => {
        runs++;
        // Returns nothing once the client is gone, so Fastify sends nothing and runs no onSend.
        await new Promise((resolve) => reply.raw.once('close', resolve));
      });
      const base = await listen(app);
      const key = fresh('silent');
      const init = { method: 'POST', headers: { ...json, 'idempotency-key': key }, body: '{}' };
      const left = new AbortController();
      const first = fetch(`${base}/silent`, { ...init, signal: left.signal });
      await until('the first /silent request to reach its handler', () => runs === 1);
      left.abort();
      await expect(first).rejects.toThrow();
      const busy = await app.inject({ method: 'POST', url: '/silent', headers: init.headers, payload: '{}' });
      expect([busy.statusCode, busy.json().code]).toEqual([409, 'IN_PROGRESS']);
      // sleep: the 300 ms lease must pass before the key is released.
      await sleep(600);
      const again = new AbortController();
      const second = fetch(`${base}/silent`, { ...init, signal: again.signal });
      await until('the retry to run the handler again', () => runs === 2);
      again.abort();
      await expect(second).rejects.toThrow();
      expect(runs).toBe(2);
    });

    it('releases such a key at once when the server closes, instead of after the lease', async () => {
      // Its clients' idle keep-alive sockets closed at once: close() would otherwise wait out fetch's 4 s keep-alive.
      const app = Fastify({ forceCloseConnections: true });
      let runs = 0;
      let closed = false;
      app.register(idempotency, { once });
      app.post('/silent', async (_req, reply) => {
        runs++;
        await new Promise((resolve) => reply.raw.once('close', resolve));
        closed = true;
      });
      const base = await listen(app);
      const key = fresh('closing');
      const init = { method: 'POST', headers: { ...json, 'idempotency-key': key }, body: '{}' };
      const left = new AbortController();
      const first = fetch(`${base}/silent`, { ...init, signal: left.signal });
      await until('the /silent request to reach its handler', () => runs === 1);
      left.abort();
      await expect(first).rejects.toThrow();
      // The handler has seen its client leave: the key stays claimed all the same.
      await until('the handler to see its client leave', () => closed);
      expect((await once.get('POST /silent', key))?.state).toBe('in_progress');
      await app.close();
      expect((await once.get('POST /silent', key))?.state).toBe('released');
      expect(runs).toBe(1);
    });

    it('marks a hijacked reply RESPONSE_NOT_STORED: the handler ran, but its bytes went past onSend', async () => {
      const app = Fastify();
      apps.push(app);
      let runs = 0;
      app.register(idempotency, { once });
      app.post('/raw', (_req, reply) => {
        runs++;
        reply.hijack();
        reply.raw.writeHead(200, { 'content-type': 'text/plain' });
        reply.raw.end('raw bytes');
      });
      const base = await listen(app);
      const init = { method: 'POST', headers: { ...json, 'idempotency-key': fresh('raw') }, body: '{}' };
      expect(await (await fetch(`${base}/raw`, init)).text()).toBe('raw bytes');
      // Until the hijacked reply is marked, the key is still in progress (409 IN_PROGRESS, the handler not run).
      const again = await until(
        'the hijacked reply to be marked RESPONSE_NOT_STORED',
        async () => read(await fetch(`${base}/raw`, init)),
        (answer) => JSON.parse(answer.body).code !== 'IN_PROGRESS',
      );
      expect([again.status, JSON.parse(again.body).code]).toEqual([409, 'RESPONSE_NOT_STORED']);
      expect(runs).toBe(1);
    });

    it('refuses to start without an engine', async () => {
      const app = Fastify();
      app.register(idempotency, {} as FastifyIdempotencyOptions);
      await expect(app.ready()).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    });
  });

describe('fastify request bodies on a real server', () => {
  let once: Oncely;
  const apps: FastifyInstance[] = [];
  beforeAll(async () => {
    once = await createOncely({ store: sqliteStore({ path: ':memory:' }) });
  });
  afterAll(async () => {
    for (const app of apps) await app.close();
    await once.close();
  });
  const headers = (key: string) => ({ 'content-type': 'application/json', 'idempotency-key': key });

  it('defect 11.3: a chunked body is cut at maxBodyBytes (413 REQUEST_TOO_LARGE) even under a larger bodyLimit', async () => {
    const { app, calls } = createApp({ once, idempotency: { maxBodyBytes: 4096 } });
    apps.push(app);
    const base = await listen(app);
    const key = `chunked-${Date.now()}`;
    const total = 20 * 1024 * 1024;
    const answer = await postChunked(`${base}/orders`, total, { headers: headers(key) });
    expect([answer.status, JSON.parse(answer.body).code]).toEqual([413, 'REQUEST_TOO_LARGE']);
    expect(answer.sent).toBeLessThan(total / 2);
    expect(calls.get(`/orders ${key}`)).toBeUndefined();
  });
});
