/**
 * An orders API on Fastify with oncely's Idempotency-Key plugin. Run it with
 * `node --import tsx examples/fastify.ts`, then
 * `curl -X POST localhost:3002/orders -H 'Idempotency-Key: "order-1"' -H 'content-type: application/json' -d '{"item":"tea","amount":3}'`
 * twice: the second answer is the first, replayed.
 */
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import Fastify, { type FastifyRequest } from 'fastify';
import { createOncely, type Oncely } from 'oncely';
import { type FastifyIdempotencyOptions, idempotency } from 'oncely/fastify';
import { sqliteStore } from 'oncely/sqlite';

/** `bytes` bytes of text, for byte-for-byte replays of large responses. */
const blob = (bytes: number) =>
  Buffer.alloc(bytes, 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_+');

/** Builds the example app, not listening yet; `calls` counts handler runs by route pattern and key, e.g. `createApp({ once }).app.inject(...)`. */
export function createApp({
  once,
  idempotency: extra = {},
}: {
  once: Oncely;
  idempotency?: Partial<FastifyIdempotencyOptions>;
}) {
  const calls = new Map<string, number>();
  const count = (req: FastifyRequest) => {
    const name = `${req.routeOptions.url} ${req.headers['idempotency-key'] ?? ''}`;
    const n = (calls.get(name) ?? 0) + 1;
    calls.set(name, n);
    return n;
  };
  const header = (req: FastifyRequest, name: string) => {
    const value = req.headers[name];
    return typeof value === 'string' ? value : undefined;
  };
  let orders = 0;
  const app = Fastify();
  // Registered on the root scope, so every route below is covered; the action is each route's pattern.
  app.register(idempotency, { once, tenant: (req) => header(req, 'x-account'), ...extra });

  app.post('/orders', async (req, reply) => {
    const { item, amount } = req.body as { item: string; amount: number };
    const orderId = `ord_${++orders}`;
    reply.code(201).header('location', `/orders/${orderId}`);
    return { orderId, item, amount, n: count(req) };
  });
  app.post<{ Params: { id: string } }>('/orders/:id/charge', async (req) => {
    return { orderId: req.params.id, charged: true, n: count(req) };
  });
  app.post('/payments/declined', async (req, reply) => {
    reply.code(402);
    return { error: 'card_declined', n: count(req) };
  });
  app.post('/flaky', async (req, reply) => {
    reply.code(503);
    return { error: 'upstream', n: count(req) };
  });
  app.post('/throws', async (req) => {
    count(req);
    throw new Error('handler failed');
  });
  app.post('/slow', async (req) => {
    const n = count(req);
    await sleep(300);
    return { done: true, n };
  });
  app.post('/stream', async (req, reply) => {
    count(req);
    reply.header('content-type', 'text/event-stream').header('cache-control', 'no-cache');
    return Readable.from(
      (async function* events() {
        for (let i = 0; i < 3; i++) {
          yield `data: ${i}\n\n`;
          await sleep(10);
        }
      })(),
    );
  });
  app.post('/blob', async (req, reply) => {
    count(req);
    reply.type('application/octet-stream');
    return blob((req.body as { bytes: number }).bytes);
  });
  app.post('/big', async (req) => {
    return { n: count(req), blob: 'x'.repeat(2 * 1024 * 1024) };
  });
  app.get<{ Params: { id: string } }>('/orders/:id', async (req) => {
    return { orderId: req.params.id };
  });
  app.patch<{ Params: { id: string } }>('/orders/:id', async (req) => {
    return { orderId: req.params.id, patched: true, n: count(req) };
  });
  return { app, calls };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const once = await createOncely({ store: sqliteStore({ path: './.oncely/example-fastify.db' }) });
  const { app } = createApp({ once });
  const port = Number(process.env.PORT ?? 3002);
  await app.listen({ port });
  console.log(`fastify example on http://localhost:${port}`);
}
