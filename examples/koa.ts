/**
 * An orders API on Koa and @koa/router with oncely's Idempotency-Key middleware on each route. Run
 * it with `node --import tsx examples/koa.ts`, then
 * `curl -X POST localhost:3005/orders -H 'Idempotency-Key: "order-1"' -H 'content-type: application/json' -d '{"item":"tea","amount":3}'`
 * twice: the second answer is the first, replayed.
 */
import { Readable } from 'node:stream';
import { pathToFileURL } from 'node:url';
import Router from '@koa/router';
import Koa, { type Context } from 'koa';
import { createOncely, type Oncely } from 'oncely';
import { type IdempotencyOptions, idempotency } from 'oncely/koa';
import { sqliteStore } from 'oncely/sqlite';

/** `bytes` bytes of text, for byte-for-byte replays of large responses. */
const blob = (bytes: number) =>
  Buffer.alloc(bytes, 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_+');

/** The parsed body the middleware leaves on the request (as @koa/bodyparser would). */
const bodyOf = <T>(ctx: Context) => (ctx.request as { body?: unknown }).body as T;

/** Builds the example app on an engine; `calls` counts handler executions by route pattern and key. */
export function createApp({
  once,
  idempotency: extra = {},
}: {
  once: Oncely;
  idempotency?: Partial<IdempotencyOptions<Context>>;
}) {
  const calls = new Map<string, number>();
  const count = (ctx: Context) => {
    const name = `${String(ctx._matchedRoute)} ${ctx.get('idempotency-key')}`;
    const n = (calls.get(name) ?? 0) + 1;
    calls.set(name, n);
    return n;
  };
  // One middleware on each route, so each action is its route pattern ('POST /orders/:id/charge').
  const idempotent = idempotency({ once, tenant: (ctx) => ctx.get('x-account') || undefined, ...extra });
  let orders = 0;
  const router = new Router();
  router.post('/orders', idempotent, (ctx) => {
    const { item, amount } = bodyOf<{ item: string; amount: number }>(ctx);
    const orderId = `ord_${++orders}`;
    ctx.status = 201;
    ctx.set('Location', `/orders/${orderId}`);
    ctx.body = { orderId, item, amount, n: count(ctx) };
  });
  router.post('/orders/:id/charge', idempotent, (ctx) => {
    ctx.body = { orderId: ctx.params.id, charged: true, n: count(ctx) };
  });
  router.post('/payments/declined', idempotent, (ctx) => {
    ctx.status = 402;
    ctx.body = { error: 'card_declined', n: count(ctx) };
  });
  router.post('/flaky', idempotent, (ctx) => {
    ctx.status = 503;
    ctx.body = { error: 'upstream', n: count(ctx) };
  });
  router.post('/throws', idempotent, (ctx) => {
    count(ctx);
    throw new Error('handler failed');
  });
  router.post('/slow', idempotent, async (ctx) => {
    const n = count(ctx);
    await new Promise((r) => setTimeout(r, 300));
    ctx.body = { done: true, n };
  });
  router.post('/stream', idempotent, (ctx) => {
    count(ctx);
    ctx.type = 'text/event-stream';
    ctx.body = Readable.from(
      (async function* () {
        for (let i = 0; i < 3; i++) {
          yield `data: ${i}\n\n`;
          await new Promise((r) => setTimeout(r, 10));
        }
      })(),
    );
  });
  router.post('/blob', idempotent, (ctx) => {
    const { bytes } = bodyOf<{ bytes: number }>(ctx);
    count(ctx);
    ctx.type = 'application/octet-stream';
    ctx.body = blob(bytes);
  });
  router.post('/big', idempotent, (ctx) => {
    ctx.body = { n: count(ctx), blob: 'x'.repeat(2 * 1024 * 1024) };
  });
  router.get('/orders/:id', idempotent, (ctx) => {
    ctx.body = { orderId: ctx.params.id };
  });
  router.patch('/orders/:id', idempotent, (ctx) => {
    ctx.body = { orderId: ctx.params.id, patched: true, n: count(ctx) };
  });
  const app = new Koa();
  // Koa logs every 5xx thrown to stderr by default; the example's thrown error is on purpose.
  app.silent = true;
  app.use(router.routes());
  return { app, calls };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const once = await createOncely({ store: sqliteStore({ path: './.oncely/example-koa.db' }) });
  const { app } = createApp({ once });
  const port = Number(process.env.PORT ?? 3005);
  app.listen(port, () => console.log(`koa example on http://localhost:${port}`));
}
