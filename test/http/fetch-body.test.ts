import { type ServerType, serve } from '@hono/node-server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { idempotent } from '../../src/fetch/index.js';
import { createOncely, type Oncely } from '../../src/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';

// oncely/fetch reads the body once, itself, and hands the handler the same request with that body
// readable again: every body reader, read once as a body is, and clone() a copy with the body.
describe('oncely/fetch: the handler reads the body the gate read', () => {
  let once: Oncely;
  beforeAll(async () => {
    once = await createOncely({ store: sqliteStore({ path: ':memory:' }) });
  });
  afterAll(() => once.close());
  let unique = 0;
  const body = JSON.stringify({ item: 'tea', amount: 3 });
  const post = (headers: Record<string, string> = {}) =>
    new Request('http://localhost/orders', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': `"body-${++unique}"`, ...headers },
      body,
    });

  it('serves text, json, arrayBuffer, bytes, blob and body once each, on the request object it was given', async () => {
    const seen: unknown[] = [];
    let given: Request | undefined;
    const wrapped = idempotent(
      async (request: Request) => {
        seen.push(request === given, request.bodyUsed);
        const copy = request.clone();
        seen.push(await copy.json());
        seen.push(await request.text(), request.bodyUsed);
        await expect(request.json()).rejects.toThrow(TypeError);
        await expect(request.arrayBuffer()).rejects.toThrow(TypeError);
        expect(() => request.clone()).toThrow(TypeError);
        return Response.json({ ok: true }, { status: 201 });
      },
      { once, route: '/orders' },
    );
    given = post();
    const res = await wrapped(given);
    expect(res.status).toBe(201);
    expect(seen).toEqual([true, false, { item: 'tea', amount: 3 }, body, true]);
    for (const read of ['arrayBuffer', 'bytes', 'blob', 'body'] as const) {
      let got = '';
      const reader = idempotent(
        async (request: Request) => {
          if (read === 'body') got = await new Response(request.body).text();
          else if (read === 'blob') got = await (await request.blob()).text();
          else got = Buffer.from(new Uint8Array(await request[read]())).toString();
          return new Response('ok', { status: 201 });
        },
        { once, route: '/orders' },
      );
      expect((await reader(post())).status).toBe(201);
      expect([read, got]).toEqual([read, body]);
    }
  });

  it('reads a declared-length body served by @hono/node-server, and a 413 over maxBodyBytes', async () => {
    let got: unknown;
    const wrapped = idempotent(
      async (request: Request) => {
        got = await request.json();
        return Response.json({ ok: true }, { status: 201 });
      },
      { once, route: '/orders', maxBodyBytes: 100 },
    );
    let server: ServerType | undefined;
    const port = await new Promise<number>((resolve) => {
      server = serve({ fetch: wrapped, port: 0, hostname: '127.0.0.1' }, (info) => resolve(info.port));
    });
    try {
      const url = `http://127.0.0.1:${port}/orders`;
      const headers = { 'content-type': 'application/json', 'idempotency-key': `"served-${++unique}"` };
      const first = await fetch(url, { method: 'POST', headers, body });
      expect([first.status, got]).toEqual([201, { item: 'tea', amount: 3 }]);
      const replay = await fetch(url, { method: 'POST', headers, body });
      expect([replay.status, replay.headers.get('idempotent-replayed')]).toEqual([201, 'true']);
      const big = await fetch(url, {
        method: 'POST',
        headers: { ...headers, 'idempotency-key': `"big-${unique}"` },
        body: JSON.stringify({ text: 'x'.repeat(200) }),
      });
      expect(big.status).toBe(413);
    } finally {
      await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
    }
  });
});
