/**
 * The dashboard mounted in a user's own server (Hono, Express, Fastify) over an oncely database
 * the test fills through the engine: the pages answer under the base path, the admin API under
 * `<base>/api` with the same protection (a wrong or missing token: 401; loopback mode: only a
 * client of this machine), POST bodies reach the API, and the app's other routes still work.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { serve } from '@hono/node-server';
import express from 'express';
import Fastify from 'fastify';
import { Hono } from 'hono';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dashboard, dashboardExpress, dashboardFastify, dashboardHono } from '../../src/dashboard/index.js';
import { openDb } from '../../src/db/index.js';
import type { Db } from '../../src/db/types.js';
import { createOncely } from '../../src/engine/engine.js';
import { recordStoreFor } from '../../src/host/records.js';
import { until } from '../support/wait.js';

const TOKEN = randomBytes(20).toString('hex');

describe('the dashboard mounted in Hono, Express and Fastify', () => {
  const path = join(mkdtempSync(join(tmpdir(), 'oncely-dash-mount-')), 'app.db');
  let db: Db;
  const servers: { base: string; close(): Promise<void> }[] = [];
  const handler = () => dashboard({ url: path, token: TOKEN, basePath: '/ops' });

  beforeAll(async () => {
    db = await openDb(path);
    const once = await createOncely({ store: recordStoreFor(db), tenant: 'default' });
    for (const key of ['A-1', 'A-2', 'A-3']) await once.run({ action: 'charge', key }, async () => ({ ok: key }));
    await once.close();
  });
  afterAll(async () => {
    for (const s of servers) await s.close();
    await db?.close();
  });

  /** Listens with a node server; resolves with its base URL. */
  const listen = async (start: () => Promise<{ port: number; close(): Promise<void> }>) => {
    const { port, close } = await start();
    const s = { base: `http://127.0.0.1:${port}`, close };
    servers.push(s);
    return s.base;
  };
  const hono = () =>
    listen(async () => {
      const app = new Hono();
      app.get('/hello', (c) => c.text('hello'));
      const mounted = handler();
      app.route('/', dashboardHono(mounted));
      const server = await new Promise<ReturnType<typeof serve>>((resolve) => {
        const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s));
      });
      return {
        port: (server.address() as AddressInfo).port,
        close: async () => {
          await new Promise((r) => server.close(r));
          await mounted.close();
        },
      };
    });
  const expressApp = () =>
    listen(async () => {
      const app = express();
      const mounted = handler();
      app.use(dashboardExpress(mounted));
      app.use(express.json());
      app.post('/hello', (req, res) => void res.json({ echoed: req.body }));
      const server = app.listen(0, '127.0.0.1');
      await new Promise((r) => server.once('listening', r));
      return {
        port: (server.address() as AddressInfo).port,
        close: async () => {
          await new Promise((r) => server.close(r));
          await mounted.close();
        },
      };
    });
  const fastify = () =>
    listen(async () => {
      const app = Fastify();
      app.post('/hello', async (req) => ({ echoed: req.body }));
      await app.register(dashboardFastify(handler()));
      await app.listen({ port: 0, host: '127.0.0.1' });
      return { port: (app.server.address() as AddressInfo).port, close: () => app.close() };
    });

  const call = async (base: string, path: string, init: RequestInit & { token?: string | null } = {}) => {
    const headers = new Headers(init.headers);
    if (init.token !== null) headers.set('authorization', `Bearer ${init.token ?? TOKEN}`);
    const res = await fetch(`${base}${path}`, { ...init, headers });
    return { status: res.status, text: await res.text(), type: res.headers.get('content-type') ?? '' };
  };

  /** The page's script modules as the browser loads them: app.js, then what each imports (siblings only). */
  const modules = async (base: string, dir: string) => {
    const loaded: { name: string; text: string }[] = [];
    for (const wanted = ['app.js']; wanted.length > 0; ) {
      const name = wanted.shift() as string;
      if (loaded.some((m) => m.name === name)) continue;
      const script = await call(base, `${dir}${name}`, { token: null });
      expect(script.status, name).toBe(200);
      expect(script.type).toContain('text/javascript');
      loaded.push({ name, text: script.text });
      for (const [, specifier] of script.text.matchAll(
        /^(?:import|export)(?:\s[\w\s{},*$]+\sfrom)?\s*['"]([^'"]+)['"]/gm,
      )) {
        expect(specifier, `an import of ${name}`).toMatch(/^\.\/[\w-]+\.js$/);
        wanted.push((specifier as string).slice(2));
      }
    }
    return loaded;
  };

  it.each([
    ['Hono', hono],
    ['Express', expressApp],
    ['Fastify', fastify],
  ])('in %s: the shell, the API with its token, 401 without, bodies read, other routes untouched', async (_, start) => {
    const base = await start();
    const page = await call(base, '/ops/', { token: null });
    expect(page.status).toBe(200);
    expect(page.type).toContain('text/html');
    expect(page.text).toContain('data-api="/ops/api"');
    const style = await call(base, '/ops/app.css', { token: null });
    expect(style.type).toContain('text/css');
    const scripts = await modules(base, '/ops/');
    expect(scripts.map((s) => s.name)).toContain('api.js');
    // Small: the whole page is under 40 kB before compression, and fetches nothing from elsewhere.
    const whole = [page.text, style.text, ...scripts.map((s) => s.text)].join('');
    expect(whole.length).toBeLessThan(40_000);
    expect(whole).not.toMatch(/https?:\/\/(?!www\.w3\.org\/2000\/svg)/);
    const overview = await call(base, '/ops/api/overview');
    expect(overview.status).toBe(200);
    expect(JSON.parse(overview.text).data.records).toEqual({ succeeded: 3 });
    for (const token of [null, 'wrong-token-0123456789abc']) {
      const denied = await call(base, '/ops/api/records', { token });
      expect(denied.status).toBe(401);
      expect(denied.text).not.toContain('A-1');
    }
    // A JSON body reaches the admin API (a replay of an event that is not there: 404, not a hang or a 400).
    const replay = await call(base, '/ops/api/events/dead/replay', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ source: 'shop', id: 'evt-none' }),
    });
    expect(replay.status, replay.text).toBe(404);
    expect(JSON.parse(replay.text).error.code).toBe('NOT_FOUND');
    if (_ !== 'Hono') {
      const hello = await call(base, '/hello', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ n: 1 }),
        token: null,
      });
      expect(JSON.parse(hello.text)).toEqual({ echoed: { n: 1 } });
    } else expect((await call(base, '/hello', { token: null })).text).toBe('hello');
  });

  it('with no token answers only loopback clients that name this machine; samples for the charts when asked', async () => {
    const app = express();
    const mounted = dashboard({ db, basePath: '/ops', sample: true });
    app.use(dashboardExpress(mounted));
    const server = app.listen(0, '127.0.0.1');
    await new Promise((r) => server.once('listening', r));
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      expect((await call(base, '/ops/api/overview', { token: null })).status).toBe(200);
      // A page whose name was rebound to 127.0.0.1 names its own host (fetch cannot set Host: node:http can).
      const rebound = await new Promise<number | undefined>((resolve, reject) =>
        request(`${base}/ops/api/overview`, { headers: { host: 'evil.example' } }, (res) => {
          res.resume();
          resolve(res.statusCode);
        })
          .on('error', reject)
          .end(),
      );
      expect(rebound).toBe(403);
      // sample: true takes the first sample a second after the first request built the dashboard.
      const series = await until(
        'the first sample of the charts',
        async () => JSON.parse((await call(base, '/ops/api/series?window=1h', { token: null })).text).data,
        (data) => data.samples.length > 0,
      );
      // The database's totals at that minute: what the stats route answers (nothing counted since).
      const stats = JSON.parse((await call(base, '/ops/api/stats', { token: null })).text).data;
      expect(series.samples[0].rateTotals).toEqual(stats.rateTotals);
    } finally {
      await new Promise((r) => server.close(r));
      await mounted.close();
    }
  });

  it('refuses a bad token or base path where the server is built', () => {
    expect(() => dashboard({ db, token: 'short' })).toThrow(/at least 16/);
    expect(() => dashboard({ db, basePath: '/ops"><script>' })).toThrow(/plain path/);
    expect(() => dashboard({})).toThrow(/one of/);
  });
});
