import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Router from '@koa/router';
import Koa from 'koa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../../examples/koa.js';
import { createOncely, type Oncely } from '../../src/index.js';
import { idempotency } from '../../src/koa/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';
import { describeBodyLimits } from './bodies.js';
import { serveListener } from './express-serve.js';
import { describeHttpSuite, type HttpHarness } from './suite.js';

/** In process through light-my-request on Koa's own callback; listening on a real port. */
const harness: HttpHarness = {
  async start({ once, listen, middleware }) {
    const { app, calls } = createApp({ once, idempotency: middleware });
    return { ...(await serveListener(app.callback(), listen)), calls };
  },
};

describeHttpSuite('koa', harness);

describeBodyLimits('koa', async (once) => serveListener(createApp({ once }).app.callback(), true));

describe('koa specifics', () => {
  const dir = mkdtempSync(join(tmpdir(), 'oncely-koa-'));
  let once: Oncely;
  beforeAll(async () => {
    once = await createOncely({ store: sqliteStore({ path: join(dir, 'koa.db') }) });
  });
  afterAll(async () => {
    await once.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('sends a Uint8Array body (not a Buffer) as its bytes, first and replayed, not as JSON', async () => {
    let runs = 0;
    const app = new Koa();
    const router = new Router();
    router.post('/bytes', idempotency({ once }), (ctx) => {
      runs++;
      ctx.type = 'text/plain';
      ctx.body = new Uint8Array([104, 105]);
    });
    app.use(router.routes());
    const served = await serveListener(app.callback(), true);
    try {
      const post = { method: 'POST', headers: { 'idempotency-key': '"bytes-1"' } };
      const first = await fetch(`${served.base}/bytes`, post);
      expect([first.status, first.headers.get('content-length'), await first.text()]).toEqual([200, '2', 'hi']);
      const again = await fetch(`${served.base}/bytes`, post);
      expect([again.headers.get('idempotent-replayed'), await again.text()]).toEqual(['true', 'hi']);
      expect(runs).toBe(1);
    } finally {
      await served.close();
    }
  });
});
