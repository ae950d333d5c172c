import { mkdtempSync, rmSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import express, { type NextFunction, type Request, type Response } from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { idempotency } from '../../src/express/index.js';
import { createOncely, type Oncely } from '../../src/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';
import { serve } from './express-serve.js';

const post = (key?: string) => ({
  method: 'POST',
  headers: { 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}) },
  body: '{}',
});

/** Upper-cases the body on its way out, wrapping write and end on each response as compression does. */
function shouting(_req: Request, res: Response, next: NextFunction): void {
  const write = res.write;
  const end = res.end;
  const loud = (chunk: unknown) => (chunk === undefined ? chunk : Buffer.from(String(chunk).toUpperCase()));
  res.write = function (this: ServerResponse, chunk: unknown, ...rest: unknown[]) {
    return Reflect.apply(write, this, [loud(chunk), ...rest]);
  } as Response['write'];
  res.end = function (this: ServerResponse, chunk: unknown, ...rest: unknown[]) {
    if (typeof chunk !== 'function') res.removeHeader('content-length');
    return Reflect.apply(end, this, [typeof chunk === 'function' ? chunk : loud(chunk), ...rest]);
  } as Response['end'];
  next();
}

describe('express response capture', () => {
  const dir = mkdtempSync(join(tmpdir(), 'oncely-express-capture-'));
  let once: Oncely;
  const servers: { close(): Promise<void> }[] = [];
  beforeAll(async () => {
    once = await createOncely({ store: sqliteStore({ path: join(dir, 'capture.db') }) });
  });
  afterAll(async () => {
    for (const server of servers) await server.close();
    await once.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("holds a response through its app's prototype, not by patching each response", async () => {
    const app = express();
    app.use(express.json());
    const own: boolean[] = [];
    let runs = 0;
    app.post('/orders', idempotency({ once }), (_req, res) => {
      runs++;
      // Per-response patching would make these the response's own properties.
      own.push(['write', 'end', 'writeHead', 'setHeader'].some((name) => Object.hasOwn(res, name)));
      expect(res.headersSent).toBe(false);
      res.status(201).json({ n: runs });
      // Held until the record is written: already sent as far as the handler can tell.
      expect(res.headersSent).toBe(true);
    });
    const running = await serve(app, true);
    servers.push(running);
    for (const key of ['proto-1', 'proto-2']) {
      const first = await fetch(`${running.base}/orders`, post(key));
      expect([first.status, first.headers.get('idempotent-replayed')]).toEqual([201, null]);
      const again = await fetch(`${running.base}/orders`, post(key));
      expect([again.status, again.headers.get('idempotent-replayed')]).toEqual([201, 'true']);
      expect(await again.text()).toBe(await first.text());
    }
    expect([runs, own]).toEqual([2, [false, false]]);
  });

  it('leaves responses without a hold alone on a patched prototype', async () => {
    const app = express();
    app.use(express.json());
    const seen: unknown[] = [];
    app.post('/orders', idempotency({ once }), (_req, res) => {
      res.status(201).json({ ok: true });
    });
    app.post('/plain', (_req, res) => {
      seen.push(res.headersSent);
      res.setHeader('x-plain', 'yes');
      res.writeHead(202, { 'x-head': 'h' });
      seen.push(res.headersSent);
      res.write('a');
      res.end('b');
    });
    const running = await serve(app, true);
    servers.push(running);
    expect((await fetch(`${running.base}/orders`, post('plain-first'))).status).toBe(201);
    for (const path of ['/plain', '/orders']) {
      const got = await fetch(`${running.base}${path}`, post(path === '/orders' ? 'plain-second' : undefined));
      expect(got.headers.get('idempotent-replayed')).toBeNull();
      if (path === '/plain') {
        expect([got.status, got.headers.get('x-plain'), got.headers.get('x-head'), await got.text()]).toEqual([
          202,
          'yes',
          'h',
          'ab',
        ]);
      } else expect(await got.json()).toEqual({ ok: true });
    }
    // Node's own headersSent: false before writeHead, true after (nothing holds this response).
    expect(seen).toEqual([false, true]);
  });

  it('holds around a middleware that wrapped write and end on the response itself (as compression does)', async () => {
    const app = express();
    app.use(express.json());
    app.use(shouting);
    let runs = 0;
    app.post('/orders', idempotency({ once }), (_req, res) => {
      runs++;
      res.type('text/plain');
      res.write('made ');
      res.end(`order ${runs}`);
    });
    const running = await serve(app, true);
    servers.push(running);
    const first = await fetch(`${running.base}/orders`, post('wrapped-1'));
    expect([first.status, await first.text()]).toEqual([200, 'MADE ORDER 1']);
    const again = await fetch(`${running.base}/orders`, post('wrapped-1'));
    expect([again.headers.get('idempotent-replayed'), await again.text()]).toEqual(['true', 'MADE ORDER 1']);
    expect(runs).toBe(1);
  });
});
