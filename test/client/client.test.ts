import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../../examples/express.js';
import { createClient, InvokeError, idempotentFetch, keyFrom } from '../../src/client/index.js';
import type { Host } from '../../src/host/index.js';
import { openHost } from '../../src/host/index.js';
import { createOncely, type Oncely } from '../../src/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';
import { faultProxy } from '../../src/testing/fault-proxy.js';
import { serve } from '../http/express-serve.js';
import { until } from '../support/wait.js';

const FIXTURE = fileURLToPath(new URL('../host/fixture', import.meta.url));
const json = (body: unknown): RequestInit => ({
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify(body),
});
// Fast retries: the waits under test are the server's Retry-After, not the backoff's.
const quick = { backoff: 20, maxBackoff: 100 };

describe('idempotentFetch against the Express example through a fault proxy', () => {
  let once: Oncely;
  let app: ReturnType<typeof createApp>;
  let server: Awaited<ReturnType<typeof serve>>;
  beforeAll(async () => {
    once = await createOncely({
      store: sqliteStore({ path: join(mkdtempSync(join(tmpdir(), 'oncely-client-')), 'c.db') }),
    });
    app = createApp({ once });
    server = await serve(app.app, true);
  });
  afterAll(async () => {
    await server.close();
    await once.close();
  });

  it('gets the first answer as a replay when the proxy dropped it after the handler ran: one execution', async () => {
    const proxy = await faultProxy({ target: server.base, plan: [{ nth: 1, fault: 'drop-response' }] });
    try {
      const key = keyFrom(`ORD-${Date.now()}`, 'create');
      const answer = await idempotentFetch(`${proxy.url}/orders`, json({ item: 'tea', amount: 3 }), { key, ...quick });
      expect([answer.response.status, answer.replayed, answer.attempts]).toEqual([201, true, 2]);
      expect(await answer.response.json()).toMatchObject({ item: 'tea', amount: 3, n: 1 });
      // The server answered the first attempt (201) and only the client missed it.
      expect(proxy.requests.map((r) => [r.fault, r.upstreamStatus, r.key])).toEqual([
        ['drop-response', 201, `"${key}"`],
        [undefined, 201, `"${key}"`],
      ]);
      expect(app.calls.get(`/orders "${key}"`)).toBe(1);
    } finally {
      await proxy.close();
    }
  });

  it("waits out a 409 IN_PROGRESS's Retry-After and gets the first request's answer", async () => {
    const key = `slow-${Date.now()}`;
    const first = fetch(`${server.base}/slow`, {
      ...json({}),
      headers: { 'content-type': 'application/json', 'idempotency-key': `"${key}"` },
    });
    await until('the first request running', () => app.calls.get(`/slow "${key}"`) === 1);
    const started = Date.now();
    const answer = await idempotentFetch(`${server.base}/slow`, json({}), { key, ...quick });
    expect((await first).status).toBe(200);
    expect([answer.response.status, answer.replayed, answer.attempts]).toEqual([200, true, 2]);
    // Retry-After: 1 was honoured rather than the 20 ms backoff.
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
    expect(app.calls.get(`/slow "${key}"`)).toBe(1);
  });

  it("retries the proxy's 503 with Retry-After, then sends the same key once more", async () => {
    const proxy = await faultProxy({ target: server.base, plan: [{ nth: 1, fault: 'unavailable' }] });
    try {
      const key = keyFrom(`ORD-${Date.now()}`, 'charge');
      const started = Date.now();
      const answer = await idempotentFetch(`${proxy.url}/orders/o1/charge`, json({}), { key, ...quick });
      expect([answer.response.status, answer.replayed, answer.attempts]).toEqual([200, false, 2]);
      expect(Date.now() - started).toBeGreaterThanOrEqual(900);
      expect(proxy.requests.map((r) => [r.fault, r.key])).toEqual([
        ['unavailable', `"${key}"`],
        [undefined, `"${key}"`],
      ]);
    } finally {
      await proxy.close();
    }
  });

  it('never retries a 4xx other than 409 IN_PROGRESS and 429: KEY_REUSED and a 402 come back at once', async () => {
    const key = `reuse-${Date.now()}`;
    expect(
      (await idempotentFetch(`${server.base}/orders`, json({ item: 'a', amount: 1 }), { key })).response.status,
    ).toBe(201);
    const reused = await idempotentFetch(`${server.base}/orders`, json({ item: 'b', amount: 1 }), { key, ...quick });
    expect([reused.response.status, reused.attempts, (await reused.response.json()).code]).toEqual([
      422,
      1,
      'KEY_REUSED',
    ]);
    const declined = await idempotentFetch(`${server.base}/payments/declined`, json({}), { key: `d-${Date.now()}` });
    expect([declined.response.status, declined.attempts]).toEqual([402, 1]);
  });
});

/** A real server answering from a script, recording each attempt's headers. */
async function scripted(answers: ((res: import('node:http').ServerResponse) => void)[]) {
  const seen: IncomingHttpHeaders[] = [];
  const server: Server = createServer((req, res) => {
    seen.push(req.headers);
    req.resume();
    const answer = answers[Math.min(seen.length, answers.length) - 1];
    answer?.(res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    seen,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

describe('idempotentFetch retry rules', () => {
  it('retries 429 and 5xx with backoff, with one key and one trace id on every attempt', async () => {
    const fail = (status: number) => (res: import('node:http').ServerResponse) => res.writeHead(status).end();
    const server = await scripted([fail(429), fail(500), fail(503), (res) => res.writeHead(201).end('ok')]);
    try {
      const answer = await idempotentFetch(
        server.url,
        { method: 'POST', body: 'x' },
        { key: ['ORD-7', 'pay'], ...quick },
      );
      expect([answer.response.status, answer.attempts, answer.key]).toEqual([201, 4, 'ORD-7:pay']);
      expect(new Set(server.seen.map((h) => h['idempotency-key']))).toEqual(new Set(['"ORD-7:pay"']));
      expect(new Set(server.seen.map((h) => h['oncely-trace-id'])).size).toBe(1);
    } finally {
      await server.close();
    }
  });

  it('gives up at the deadline: the last 5xx is returned; with no answer at all, RETRIES_EXHAUSTED', async () => {
    const server = await scripted([(res) => res.writeHead(502).end()]);
    try {
      const answer = await idempotentFetch(
        server.url,
        { method: 'POST' },
        { key: 'k-deadline', deadline: 300, ...quick },
      );
      expect(answer.response.status).toBe(502);
      expect(answer.attempts).toBeGreaterThan(1);
    } finally {
      await server.close();
    }
    // Nothing listens there any more: every attempt fails to connect.
    const error = await idempotentFetch(
      server.url,
      { method: 'POST' },
      { key: 'k-gone', deadline: 300, ...quick },
    ).catch((e) => e);
    expect(error.code).toBe('RETRIES_EXHAUSTED');
    expect(error.cause).toBeInstanceOf(Error);
  });

  it('times out a hung attempt and retries it; the caller can abort the intent', async () => {
    const server = await scripted([() => {}, (res) => res.writeHead(200).end('late')]);
    try {
      const answer = await idempotentFetch(
        server.url,
        { method: 'POST' },
        { key: 'k-hung', attemptTimeout: 200, ...quick },
      );
      expect([answer.response.status, answer.attempts]).toEqual([200, 2]);
      const aborted = new AbortController();
      const hung = await scripted([() => {}]);
      setTimeout(() => aborted.abort(new Error('user left')), 100);
      const error = await idempotentFetch(
        hung.url,
        { method: 'POST' },
        { key: 'k-abort', signal: aborted.signal },
      ).catch((e) => e);
      expect(error.message).toBe('user left');
      expect(hung.seen.length).toBe(1);
      await hung.close();
    } finally {
      await server.close();
    }
  });

  it('requires a key (KEY_REQUIRED), refuses one the header cannot carry (KEY_INVALID) and a body it cannot resend', async () => {
    const call = (options: unknown, init: RequestInit = {}) =>
      idempotentFetch('http://127.0.0.1:9/', init, options as { key: string }).catch((e) => e.code);
    expect(await call({})).toBe('KEY_REQUIRED');
    expect(await call(undefined)).toBe('KEY_REQUIRED');
    expect(await call({ key: 'naïve' })).toBe('KEY_INVALID');
    expect(await call({ key: [] })).toBe('KEY_REQUIRED');
    expect(
      await call({ key: 'k' }, { method: 'POST', body: new ReadableStream(), duplex: 'half' } as RequestInit),
    ).toBe('INVALID_ARGUMENT');
  });

  it('imports nothing Node-only, so it runs in browsers', () => {
    const dir = fileURLToPath(new URL('../../src/client', import.meta.url));
    const sources = readdirSync(dir).map((file) => readFileSync(join(dir, file), 'utf8'));
    const imports = sources.flatMap((text) => [...text.matchAll(/from '([^']+)'/g)].map((m) => m[1]));
    expect(imports.filter((name) => name?.startsWith('node:') || !name?.startsWith('.'))).toEqual([]);
    const core = ['../core/backoff.js', '../core/errors.js', '../core/key.js'];
    for (const file of core)
      expect(readFileSync(join(dir, file.replace('.js', '.ts')), 'utf8')).not.toMatch(/from 'node:/);
  });
});

describe("createClient().invoke against the host's POST /v1/invoke/:handler", () => {
  let host: Host;
  let file: string;
  let base: string;
  beforeAll(async () => {
    file = join(mkdtempSync(join(tmpdir(), 'oncely-client-host-')), 'app.db');
    host = await openHost(FIXTURE, file);
    base = `http://127.0.0.1:${await host.start(0)}`;
  });
  afterAll(() => host.stop());

  it('creates the note once when the first answer is lost, and gets its data as a replay', async () => {
    const proxy = await faultProxy({ target: base, plan: [{ nth: 1, fault: 'drop-response' }] });
    try {
      const client = createClient({ baseUrl: proxy.url, ...quick });
      const body = `client-${Date.now()}`;
      const result = await client.invoke<{ id: string }>(
        'notes.create',
        { body },
        { idempotencyKey: [body, 'create'] },
      );
      expect(result.replayed).toBe(true);
      expect(result.data.id).toEqual(expect.any(String));
      expect(result.traceId).toEqual(expect.any(String));
      const db = new Database(file, { readonly: true });
      const rows = db.prepare('SELECT id FROM notes WHERE body = ?').all(body) as { id: string }[];
      db.close();
      expect(rows).toEqual([{ id: result.data.id }]);
    } finally {
      await proxy.close();
    }
  });

  it("throws the handler's own error as InvokeError with its code and status, without retrying it", async () => {
    const client = createClient({ baseUrl: base, ...quick });
    const error = await client
      .invoke('notes.create', { body: 'doomed', fail: true }, { idempotencyKey: `doomed-${Date.now()}` })
      .catch((e) => e);
    expect(error).toBeInstanceOf(InvokeError);
    expect([error.code, error.status]).toEqual(['ASKED_TO_FAIL', 409]);
  });
});

/** A server that records what each request brought (method, path, headers, body) before answering it. */
async function recording(
  answer: (req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse) => void,
) {
  const seen: { method: string; path: string; headers: IncomingHttpHeaders; body: string }[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      seen.push({
        method: req.method ?? '',
        path: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks).toString(),
      });
      answer(req, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    seen,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

describe('redirects', () => {
  it('review3.7: never sends the body or the x-api-key to another origin a 307 or 308 points at; follows one to its own', async () => {
    const other = await recording((_req, res) => res.writeHead(201).end('stolen'));
    const first = await recording((req, res) => {
      if (req.url === '/elsewhere' || req.url === '/v1/invoke/notes.create')
        res.writeHead(307, { location: `${other.url}/collect` }).end();
      else if (req.url === '/moved') res.writeHead(308, { location: `${other.url}/collect` }).end();
      else if (req.url === '/here') res.writeHead(307, { location: '/orders' }).end();
      else res.writeHead(201, { 'content-type': 'application/json' }).end('{"ok":true}');
    });
    const secret = { 'x-api-key': 'sk-live-123', 'content-type': 'application/json' };
    const body = JSON.stringify({ card: '4242' });
    try {
      for (const path of ['/elsewhere', '/moved']) {
        const answer = await idempotentFetch(
          `${first.url}${path}`,
          { method: 'POST', headers: secret, body },
          { key: `redirect-${path.slice(1)}`, ...quick },
        );
        // The redirect is the answer, returned once (a 3xx is not retried).
        expect([answer.response.status, answer.attempts], path).toEqual([path === '/moved' ? 308 : 307, 1]);
        expect(answer.response.headers.get('location')).toBe(`${other.url}/collect`);
      }
      const client = createClient({ baseUrl: first.url, headers: { 'x-api-key': 'sk-live-123' }, ...quick });
      const answer = await client.request('/elsewhere', { method: 'POST', body }, { key: 'redirect-client' });
      expect(answer.response.status).toBe(307);
      // invoke has no envelope to read from a redirect: InvokeError with its status.
      const thrown = await client
        .invoke('notes.create', { body: 'x' }, { idempotencyKey: 'redirect-invoke' })
        .catch((e) => e);
      expect(thrown).toBeInstanceOf(InvokeError);
      expect(thrown.status).toBe(307);
      expect(first.seen.map((r) => r.path)).toEqual(['/elsewhere', '/moved', '/elsewhere', '/v1/invoke/notes.create']);
      expect(other.seen).toEqual([]);

      // To its own origin, a 307 is followed with the same method, body, key and headers.
      const here = await idempotentFetch(
        `${first.url}/here`,
        { method: 'POST', headers: secret, body },
        { key: 'redirect-here', ...quick },
      );
      expect([here.response.status, here.attempts]).toEqual([201, 1]);
      const followed = first.seen.at(-1);
      expect([followed?.method, followed?.path, followed?.body]).toEqual(['POST', '/orders', body]);
      expect([followed?.headers['x-api-key'], followed?.headers['idempotency-key']]).toEqual([
        'sk-live-123',
        '"redirect-here"',
      ]);
      expect(other.seen).toEqual([]);
    } finally {
      await Promise.all([first.close(), other.close()]);
    }
  });
});
