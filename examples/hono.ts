/**
 * An orders API on Hono with oncely's Idempotency-Key middleware. Run it with
 * `node --import tsx examples/hono.ts`, then
 * `curl -X POST localhost:3003/orders -H 'Idempotency-Key: "order-1"' -H 'content-type: application/json' -d '{"item":"tea","amount":3}'`
 * twice: the second answer is the first, replayed.
 */
import { pathToFileURL } from 'node:url';
import { serve } from '@hono/node-server';
import { type Context, Hono } from 'hono';
import { stream } from 'hono/streaming';
import { createOncely, type Oncely } from 'oncely';
import { type IdempotencyOptions, idempotency } from 'oncely/hono';
import { sqliteStore } from 'oncely/sqlite';

/** `bytes` bytes of text, for byte-for-byte replays of large responses. */
const blob = (bytes: number) =>
  Buffer.alloc(bytes, 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_+');

/** Builds the example app on an engine; `calls` counts handler executions by route and key. */
export function createApp({
  once,
  idempotency: extra = {},
}: {
  once: Oncely;
  idempotency?: Partial<IdempotencyOptions<Context>>;
}) {
  const calls = new Map<string, number>();
  const count = (c: Context) => {
    const name = `${c.req.routePath} ${c.req.header('idempotency-key') ?? ''}`;
    const n = (calls.get(name) ?? 0) + 1;
    calls.set(name, n);
    return n;
  };
  let orders = 0;
  const app = new Hono();
  app.use('*', idempotency({ once, tenant: (c) => c.req.header('x-account'), ...extra }));
  app.onError((_error, c) => c.json({ error: 'internal' }, 500));
  app.post('/orders', async (c) => {
    const { item, amount } = await c.req.json<{ item: string; amount: number }>();
    const orderId = `ord_${++orders}`;
    c.header('Location', `/orders/${orderId}`);
    return c.json({ orderId, item, amount, n: count(c) }, 201);
  });
  app.post('/orders/:id/charge', (c) => c.json({ orderId: c.req.param('id'), charged: true, n: count(c) }));
  app.post('/payments/declined', (c) => c.json({ error: 'card_declined', n: count(c) }, 402));
  app.post('/flaky', (c) => c.json({ error: 'upstream', n: count(c) }, 503));
  app.post('/throws', (c) => {
    count(c);
    throw new Error('handler failed');
  });
  app.post('/slow', async (c) => {
    const n = count(c);
    await new Promise((r) => setTimeout(r, 300));
    return c.json({ done: true, n });
  });
  app.post('/stream', (c) => {
    count(c);
    c.header('content-type', 'text/event-stream');
    return stream(c, async (s) => {
      for (let i = 0; i < 3; i++) {
        await s.write(`data: ${i}\n\n`);
        await s.sleep(10);
      }
    });
  });
  app.post('/blob', async (c) => {
    const { bytes } = await c.req.json<{ bytes: number }>();
    count(c);
    return c.body(blob(bytes), 200, { 'content-type': 'application/octet-stream' });
  });
  app.post('/big', (c) => c.json({ n: count(c), blob: 'x'.repeat(2 * 1024 * 1024) }));
  app.get('/orders/:id', (c) => c.json({ orderId: c.req.param('id') }));
  app.patch('/orders/:id', (c) => c.json({ orderId: c.req.param('id'), patched: true, n: count(c) }));
  return { app, calls };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const once = await createOncely({ store: sqliteStore({ path: './.oncely/example-hono.db' }) });
  const { app } = createApp({ once });
  const port = Number(process.env.PORT ?? 3003);
  serve({ fetch: app.fetch, port }, () => console.log(`hono example on http://localhost:${port}`));
}
