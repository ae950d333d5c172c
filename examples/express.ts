/**
 * An orders API on Express with oncely's Idempotency-Key middleware. Run it with
 * `node --import tsx examples/express.ts`, then
 * `curl -X POST localhost:3001/orders -H 'Idempotency-Key: "order-1"' -H 'content-type: application/json' -d '{"item":"tea","amount":3}'`
 * twice: the second answer is the first, replayed.
 */
import { pathToFileURL } from 'node:url';
import express, { type NextFunction, type Request, type Response } from 'express';
import { createOncely, type Oncely } from 'oncely';
import { type IdempotencyOptions, idempotency } from 'oncely/express';
import { sqliteStore } from 'oncely/sqlite';

/** `bytes` bytes of text, for byte-for-byte replays of large responses. */
const blob = (bytes: number) =>
  Buffer.alloc(bytes, 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_+');

/** Builds the example app on an engine; `calls` counts handler executions by route pattern and key. */
export function createApp({
  once,
  idempotency: extra = {},
}: {
  once: Oncely;
  idempotency?: Partial<IdempotencyOptions<Request>>;
}) {
  const calls = new Map<string, number>();
  const count = (req: Request) => {
    const name = `${req.baseUrl}${req.route.path} ${req.get('idempotency-key') ?? ''}`;
    const n = (calls.get(name) ?? 0) + 1;
    calls.set(name, n);
    return n;
  };
  // One middleware per route, so each action is its route pattern ('POST /orders/:id/charge').
  const idempotent = idempotency({ once, tenant: (req) => req.get('x-account'), ...extra });
  let orders = 0;
  const app = express();
  app.use(express.json());
  app.post('/orders', idempotent, (req, res) => {
    const { item, amount } = req.body as { item: string; amount: number };
    const orderId = `ord_${++orders}`;
    res
      .status(201)
      .location(`/orders/${orderId}`)
      .json({ orderId, item, amount, n: count(req) });
  });
  app.post('/orders/:id/charge', idempotent, (req, res) => {
    res.json({ orderId: req.params.id, charged: true, n: count(req) });
  });
  app.post('/payments/declined', idempotent, (req, res) => {
    res.status(402).json({ error: 'card_declined', n: count(req) });
  });
  app.post('/flaky', idempotent, (req, res) => {
    res.status(503).json({ error: 'upstream', n: count(req) });
  });
  app.post('/throws', idempotent, (req) => {
    count(req);
    throw new Error('handler failed');
  });
  app.post('/slow', idempotent, async (req, res) => {
    const n = count(req);
    await new Promise((r) => setTimeout(r, 300));
    res.json({ done: true, n });
  });
  app.post('/stream', idempotent, async (req, res) => {
    count(req);
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    for (let i = 0; i < 3; i++) {
      res.write(`data: ${i}\n\n`);
      await new Promise((r) => setTimeout(r, 10));
    }
    res.end();
  });
  app.post('/blob', idempotent, (req, res) => {
    count(req);
    res.type('application/octet-stream').send(blob((req.body as { bytes: number }).bytes));
  });
  app.post('/big', idempotent, (req, res) => {
    res.json({ n: count(req), blob: 'x'.repeat(2 * 1024 * 1024) });
  });
  app.get('/orders/:id', idempotent, (req, res) => {
    res.json({ orderId: req.params.id });
  });
  app.patch('/orders/:id', idempotent, (req, res) => {
    res.json({ orderId: req.params.id, patched: true, n: count(req) });
  });
  // JSON errors, as an API would send them; a body parser's 400 or 413 keeps its status.
  app.use(
    (
      error: { status?: number; expose?: boolean; message?: string },
      _req: Request,
      res: Response,
      _next: NextFunction,
    ) => {
      const status = error.status ?? 500;
      res.status(status).json({ error: error.expose ? error.message : 'internal' });
    },
  );
  return { app, calls };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const once = await createOncely({ store: sqliteStore({ path: './.oncely/example-express.db' }) });
  const { app } = createApp({ once });
  const port = Number(process.env.PORT ?? 3001);
  app.listen(port, () => console.log(`express example on http://localhost:${port}`));
}
