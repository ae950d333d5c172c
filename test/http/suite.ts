import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOncely, type Oncely, type RecordStore } from '../../src/index.js';
import { postgresStore } from '../../src/postgres/index.js';
import { redisStore } from '../../src/redis/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { connectRedis, dropPrefix, freshPrefix, REDIS_URL } from '../support/redis.js';
import { type StoreName, selectStores } from '../support/store-filter.js';
import { until } from '../support/wait.js';

/** One request, as the suite sends it. */
export interface SuiteRequest {
  method: string;
  path: string;
  headers?: Record<string, string>;
  body?: unknown;
}

/** One response: lower-case header names, the body as text. */
export interface SuiteResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** A fetch Response as the suite compares it. */
export async function readResponse(res: Response): Promise<SuiteResponse> {
  const headers: Record<string, string> = {};
  res.headers.forEach((value, name) => {
    headers[name] = value;
  });
  return { status: res.status, headers, body: await res.text() };
}

/** A running example app: in process (the framework's own injection) or behind a real listening server. */
export interface RunningApp {
  request(request: SuiteRequest): Promise<SuiteResponse>;
  /** Handler executions by `<route pattern> <Idempotency-Key header>`. */
  calls: Map<string, number>;
  close(): Promise<void>;
}

/** How the suite starts a framework's example app (examples/<framework>.ts). */
export interface HttpHarness {
  start(options: { once: Oncely; listen: boolean; middleware?: Record<string, unknown> }): Promise<RunningApp>;
}

let unique = 0;
/** A key no other test uses, so tests sharing one store never meet. */
export const fresh = (label: string) => `${label}-${process.pid}-${Date.now()}-${++unique}`;
const json = (_body: unknown) => ({ 'content-type': 'application/json' });

/** Runs every behaviour of the issue against one framework, on SQLite, PostgreSQL and Redis, in process and listening. */
export function describeHttpSuite(framework: string, harness: HttpHarness): void {
  const schema = freshSchema();
  const prefix = freshPrefix();
  const backends = selectStores<{ name: StoreName; makeStore: () => RecordStore; cleanup: () => Promise<void> }>([
    {
      name: 'sqlite',
      makeStore: () => sqliteStore({ path: join(mkdtempSync(join(tmpdir(), `oncely-${framework}-`)), 'http.db') }),
      cleanup: async () => {},
    },
    {
      name: 'postgres',
      makeStore: () => postgresStore({ connectionString: POSTGRES_URL, schema }),
      cleanup: () => dropSchema(schema),
    },
    {
      name: 'redis',
      makeStore: () => redisStore({ url: REDIS_URL, prefix }),
      cleanup: async () => {
        const redis = await connectRedis();
        await dropPrefix(redis, prefix);
        await redis.quit();
      },
    },
  ]);
  afterAll(async () => {
    for (const { cleanup } of backends) await cleanup();
  });
  for (const { name: backend, makeStore } of backends)
    for (const listen of [false, true])
      describe(`${framework} on ${backend}, ${listen ? 'listening' : 'in process'}`, () => {
        let once: Oncely;
        const apps: RunningApp[] = [];
        beforeAll(async () => {
          once = await createOncely({ store: makeStore(), tenant: 'default' });
        });
        afterAll(async () => {
          for (const app of apps) await app.close();
          await once.close();
        });
        const start = async (middleware?: Record<string, unknown>) => {
          const app = await harness.start({ once, listen, middleware });
          apps.push(app);
          return app;
        };
        const post = (
          app: RunningApp,
          path: string,
          key: string | undefined,
          body?: unknown,
          headers: Record<string, string> = {},
        ) =>
          app.request({
            method: 'POST',
            path,
            headers: { ...json(body), ...(key === undefined ? {} : { 'idempotency-key': key }), ...headers },
            body,
          });

        it('runs the handler once and replays status, headers and body byte for byte', async () => {
          const app = await start();
          const key = fresh('order');
          const first = await post(app, '/orders', `"${key}"`, { item: 'tea', amount: 3 });
          expect(first.status).toBe(201);
          expect(first.headers['idempotent-replayed']).toBeUndefined();
          expect(first.headers['idempotency-expires']).toMatch(/GMT$/);
          const again = await post(app, '/orders', `"${key}"`, { amount: 3, item: 'tea' });
          expect(again.status).toBe(201);
          expect(again.body).toBe(first.body);
          expect(again.headers['idempotent-replayed']).toBe('true');
          expect(again.headers.location).toBe(first.headers.location);
          expect(again.headers['content-type']).toBe(first.headers['content-type']);
          expect(JSON.parse(again.body)).toMatchObject({ item: 'tea', amount: 3, n: 1 });
          expect(app.calls.get(`/orders "${key}"`)).toBe(1);
        });

        it('reads the key as a structured-field string or, for compatibility, a bare token', async () => {
          const app = await start();
          const key = fresh('token');
          const bare = await post(app, '/orders/o1/charge', key, {});
          const quoted = await post(app, '/orders/o1/charge', `"${key}"`, {});
          expect(bare.status).toBe(200);
          expect(quoted.headers['idempotent-replayed']).toBe('true');
          expect(quoted.body).toBe(bare.body);
        });

        it('answers a missing, malformed or too long key with 400 problem+json and never runs the handler', async () => {
          const app = await start();
          const missing = await post(app, '/orders', undefined, { item: 'x', amount: 1 });
          expect(missing.status).toBe(400);
          expect(missing.headers['content-type']).toMatch(/^application\/problem\+json/);
          expect(JSON.parse(missing.body)).toMatchObject({
            status: 400,
            code: 'KEY_REQUIRED',
            title: expect.stringContaining('Idempotency-Key'),
          });
          for (const bad of ['"unterminated', 'has space', `"${'k'.repeat(256)}"`, '""']) {
            const r = await post(app, '/orders', bad, { item: 'x', amount: 1 });
            expect(r.status, bad).toBe(400);
            expect(JSON.parse(r.body).code).toBe('KEY_INVALID');
          }
          expect([...app.calls.keys()].filter((k) => k.startsWith('/orders '))).toEqual([]);
          expect((await post(app, '/orders', `"${'k'.repeat(255)}"`, { item: 'x', amount: 1 })).status).toBe(201);
        });

        it('answers 409 with Retry-After while the first request runs, and with wait returns its response', async () => {
          const app = await start();
          const key = fresh('slow');
          const first = post(app, '/slow', key, {});
          await until('the first /slow request to reach its handler', () => app.calls.get(`/slow ${key}`) === 1);
          const busy = await post(app, '/slow', key, {});
          expect(busy.status).toBe(409);
          expect(Number(busy.headers['retry-after'])).toBeGreaterThanOrEqual(1);
          expect(JSON.parse(busy.body).code).toBe('IN_PROGRESS');
          expect((await first).status).toBe(200);
          const patient = await start({ wait: '5s' });
          const key2 = fresh('slow-wait');
          const running = post(patient, '/slow', key2, {});
          await until('the first /slow request to reach its handler', () => patient.calls.get(`/slow ${key2}`) === 1);
          const [a, b] = await Promise.all([running, post(patient, '/slow', key2, {})]);
          expect([a.status, b.status]).toEqual([200, 200]);
          expect(b.body).toBe(a.body);
          expect(b.headers['idempotent-replayed']).toBe('true');
          expect(patient.calls.get(`/slow ${key2}`)).toBe(1);
        });

        it('answers 422 problem+json to the same key with another body', async () => {
          const app = await start();
          const key = fresh('reuse');
          expect((await post(app, '/orders', key, { item: 'tea', amount: 3 })).status).toBe(201);
          const other = await post(app, '/orders', key, { item: 'tea', amount: 4 });
          expect(other.status).toBe(422);
          expect(other.headers['content-type']).toMatch(/^application\/problem\+json/);
          expect(JSON.parse(other.body).code).toBe('KEY_REUSED');
        });

        it('stores 4xx responses of the handler, and releases the key after a 5xx or a thrown error', async () => {
          const app = await start();
          const declined = fresh('declined');
          expect((await post(app, '/payments/declined', declined, {})).status).toBe(402);
          const replay = await post(app, '/payments/declined', declined, {});
          expect([replay.status, replay.headers['idempotent-replayed']]).toEqual([402, 'true']);
          const flaky = fresh('flaky');
          expect((await post(app, '/flaky', flaky, {})).status).toBe(503);
          const retried = await post(app, '/flaky', flaky, {});
          expect([retried.status, retried.headers['idempotent-replayed'], JSON.parse(retried.body).n]).toEqual([
            503,
            undefined,
            2,
          ]);
          const thrown = fresh('throws');
          expect((await post(app, '/throws', thrown, {})).status).toBe(500);
          expect((await post(app, '/throws', thrown, {})).status).toBe(500);
          expect(app.calls.get(`/throws ${thrown}`)).toBe(2);
        });

        it('keeps tenants apart and scopes keys by route', async () => {
          const app = await start();
          const key = fresh('shared');
          const a = await post(app, '/orders', key, { item: 'tea', amount: 1 }, { 'x-account': 'acct-a' });
          const b = await post(app, '/orders', key, { item: 'tea', amount: 1 }, { 'x-account': 'acct-b' });
          expect([a.status, b.status]).toEqual([201, 201]);
          expect(JSON.parse(a.body).orderId).not.toBe(JSON.parse(b.body).orderId);
          expect(b.headers['idempotent-replayed']).toBeUndefined();
          const charge = await post(
            app,
            '/orders/o9/charge',
            key,
            { item: 'tea', amount: 1 },
            { 'x-account': 'acct-a' },
          );
          expect([charge.status, charge.headers['idempotent-replayed']]).toEqual([200, undefined]);
        });

        it('never stores a streamed or oversized response half: the duplicate gets 409 RESPONSE_NOT_STORED', async () => {
          const app = await start();
          const key = fresh('stream');
          const streamed = await post(app, '/stream', key, {});
          expect(streamed.body).toBe('data: 0\n\ndata: 1\n\ndata: 2\n\n');
          const again = await post(app, '/stream', key, {});
          expect([again.status, JSON.parse(again.body).code]).toEqual([409, 'RESPONSE_NOT_STORED']);
          const bigKey = fresh('big');
          const big = await post(app, '/big', bigKey, {});
          expect(big.status).toBe(200);
          expect(big.body.length).toBeGreaterThan(2 * 1024 * 1024);
          expect(JSON.parse((await post(app, '/big', bigKey, {})).body).code).toBe('RESPONSE_NOT_STORED');
          expect(app.calls.get(`/big ${bigKey}`)).toBe(1);
        });

        it("defect 11.8: the same key on another order's path is KEY_REUSED, not a replay", async () => {
          const app = await start();
          const key = fresh('path');
          const first = await post(app, '/orders/o1/charge', key, {});
          expect([first.status, JSON.parse(first.body).orderId]).toEqual([200, 'o1']);
          const other = await post(app, '/orders/o2/charge', key, {});
          expect([other.status, JSON.parse(other.body).code]).toEqual([422, 'KEY_REUSED']);
          // The query string is part of the request target too.
          const query = await post(app, '/orders/o1/charge?notify=1', key, {});
          expect([query.status, JSON.parse(query.body).code]).toEqual([422, 'KEY_REUSED']);
          const again = await post(app, '/orders/o1/charge', key, {});
          expect([again.status, again.headers['idempotent-replayed'], again.body]).toEqual([200, 'true', first.body]);
          expect(app.calls.get(`/orders/:id/charge ${key}`)).toBe(1);
        });

        it('defect 11.11: a 900 KiB response (and one of exactly maxBodyBytes) is replayed byte for byte, not 500 RESULT_TOO_LARGE', async () => {
          const app = await start();
          for (const bytes of [900 * 1024, 1024 * 1024]) {
            const key = fresh('blob');
            const first = await post(app, '/blob', key, { bytes });
            expect([first.status, first.body.length]).toEqual([200, bytes]);
            const again = await post(app, '/blob', key, { bytes });
            expect([again.status, again.headers['idempotent-replayed'], again.body.length]).toEqual([
              200,
              'true',
              bytes,
            ]);
            expect(again.body === first.body, 'replayed body differs').toBe(true);
            expect(app.calls.get(`/blob ${key}`)).toBe(1);
          }
        });

        it('defect 11.11: the stored limit follows maxBodyBytes, and a response over it is 409 RESPONSE_NOT_STORED to its duplicate, never 500', async () => {
          const app = await start({ maxBodyBytes: 2 * 1024 * 1024 });
          const kept = fresh('blob-kept');
          const bytes = 1536 * 1024;
          expect((await post(app, '/blob', kept, { bytes })).status).toBe(200);
          const replay = await post(app, '/blob', kept, { bytes });
          expect([replay.status, replay.headers['idempotent-replayed'], replay.body.length]).toEqual([
            200,
            'true',
            bytes,
          ]);
          const over = fresh('blob-over');
          const first = await post(app, '/blob', over, { bytes: 2 * 1024 * 1024 + 1 });
          expect([first.status, first.body.length]).toEqual([200, 2 * 1024 * 1024 + 1]);
          const duplicate = await post(app, '/blob', over, { bytes: 2 * 1024 * 1024 + 1 });
          expect([duplicate.status, JSON.parse(duplicate.body).code]).toEqual([409, 'RESPONSE_NOT_STORED']);
          expect(app.calls.get(`/blob ${over}`)).toBe(1);
        });

        it('refuses request bodies over maxBodyBytes with 413 before the handler, without storing anything', async () => {
          const app = await start({ maxBodyBytes: 100 });
          const key = fresh('large');
          const large = await post(app, '/orders', key, { item: 'x'.repeat(200), amount: 1 });
          expect([large.status, JSON.parse(large.body).code]).toEqual([413, 'REQUEST_TOO_LARGE']);
          expect((await post(app, '/orders', key, { item: 'x', amount: 1 })).status).toBe(201);
        });

        it('answers an action the engine refuses with 400 INVALID_ARGUMENT on every request, never running the handler', async () => {
          const app = await start({ action: () => ' ' });
          const key = fresh('action');
          for (let i = 0; i < 2; i++) {
            const refused = await post(app, '/orders', `"${key}"`, { item: 'tea', amount: 3 });
            expect(refused.status).toBe(400);
            expect(JSON.parse(refused.body)).toMatchObject({ code: 'INVALID_ARGUMENT' });
          }
          expect(app.calls.get(`/orders "${key}"`)).toBeUndefined();
        });

        it('builds the key from body fields (or a function of the body) with keyFrom when no header is sent', async () => {
          const app = await start({ key: ['orderId', 'action'] });
          const orderId = fresh('ORD');
          const order = { item: 'tea', amount: 2, orderId, action: 'create' };
          const first = await post(app, '/orders', undefined, order);
          const again = await post(app, '/orders', undefined, { ...order });
          expect([first.status, again.status, again.headers['idempotent-replayed']]).toEqual([201, 201, 'true']);
          expect(again.body).toBe(first.body);
          expect(app.calls.get('/orders ')).toBe(1);
          // Another action of the same order is another key; a missing field is no key at all.
          const cancel = await post(app, '/orders', undefined, { ...order, action: 'cancel' });
          expect([cancel.status, cancel.headers['idempotent-replayed']]).toEqual([201, undefined]);
          const missing = await post(app, '/orders', undefined, { item: 'tea', amount: 2, orderId });
          expect([missing.status, JSON.parse(missing.body).code]).toEqual([400, 'KEY_REQUIRED']);
          const unusable = await post(app, '/orders', undefined, { ...order, orderId: { nested: true } });
          expect([unusable.status, JSON.parse(unusable.body).code]).toEqual([400, 'KEY_INVALID']);
          // The header wins over the body: a new intent despite the same body fields.
          const headed = await post(app, '/orders', fresh('header'), order);
          expect([headed.status, headed.headers['idempotent-replayed']]).toEqual([201, undefined]);
          const derived = await start({ key: (_req: unknown, body: { orderId: string }) => [body.orderId, 'fn'] });
          const viaFn = await post(derived, '/orders', undefined, order);
          const viaFnAgain = await post(derived, '/orders', undefined, order);
          expect([viaFn.status, viaFnAgain.headers['idempotent-replayed'], viaFnAgain.body]).toEqual([
            201,
            'true',
            viaFn.body,
          ]);
          expect(derived.calls.get('/orders ')).toBe(1);
        });

        it('passes GET through untouched, covers PATCH, and lets keyless requests through when not required', async () => {
          const app = await start();
          const got = await app.request({ method: 'GET', path: '/orders/o5' });
          expect([got.status, got.headers['idempotent-replayed'], got.headers['idempotency-expires']]).toEqual([
            200,
            undefined,
            undefined,
          ]);
          const key = fresh('patch');
          const patched = await app.request({
            method: 'PATCH',
            path: '/orders/o5',
            headers: { ...json({}), 'idempotency-key': key },
            body: {},
          });
          expect(patched.status).toBe(200);
          const replayed = await app.request({
            method: 'PATCH',
            path: '/orders/o5',
            headers: { ...json({}), 'idempotency-key': key },
            body: {},
          });
          expect(replayed.headers['idempotent-replayed']).toBe('true');
          const optional = await start({ required: false });
          expect((await post(optional, '/orders', undefined, { item: 'x', amount: 1 })).status).toBe(201);
          expect(
            (await post(optional, '/orders', undefined, { item: 'x', amount: 1 })).headers['idempotent-replayed'],
          ).toBeUndefined();
        });
      });
}
