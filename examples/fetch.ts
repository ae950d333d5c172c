/**
 * An orders API as fetch-style handlers (the shape of Next.js route handlers, Bun.serve, Deno.serve
 * and Workers), each wrapped with oncely's Idempotency-Key gate, served here by Node's fetch bridge
 * of @hono/node-server. Run it with `node --import tsx examples/fetch.ts`, then
 * `curl -X POST localhost:3004/orders -H 'Idempotency-Key: "order-1"' -H 'content-type: application/json' -d '{"item":"tea","amount":3}'`
 * twice: the second answer is the first, replayed.
 */
import { pathToFileURL } from 'node:url';
import { serve } from '@hono/node-server';
import { createOncely, type Oncely } from 'oncely';
import { type FetchIdempotencyOptions, idempotent } from 'oncely/fetch';
import { sqliteStore } from 'oncely/sqlite';

/** `bytes` bytes of text, for byte-for-byte replays of large responses. */
const blob = (bytes: number) =>
  Buffer.alloc(bytes, 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_+');

/** What a route handler gets besides the request, as Next.js passes `{ params }`. */
interface RouteContext {
  params: Record<string, string>;
}
type Route = (request: Request, context: RouteContext) => Response | Promise<Response>;

const json = (value: unknown, status = 200, headers: Record<string, string> = {}) =>
  Response.json(value, { status, headers });

/** Builds the example app on an engine; `calls` counts handler executions by route pattern and key. */
export function createApp({
  once,
  idempotency: extra = {},
}: {
  once: Oncely;
  idempotency?: Partial<FetchIdempotencyOptions>;
}) {
  const calls = new Map<string, number>();
  const routes: { method: string; pattern: string; match: RegExp; handler: Route }[] = [];
  /** One wrapped handler per route, as one route file of Next.js exports one per method. */
  const route = (method: string, pattern: string, handler: Route) => {
    const counted: Route = (request, context) => handler(request, context);
    const wrapped = idempotent(counted, {
      once,
      route: pattern,
      tenant: (request) => request.headers.get('x-account') ?? undefined,
      ...extra,
    });
    const match = new RegExp(`^${pattern.replace(/:(\w+)/g, '(?<$1>[^/]+)')}$`);
    routes.push({ method, pattern, match, handler: method === 'GET' ? handler : wrapped });
  };
  const count = (pattern: string, request: Request) => {
    const name = `${pattern} ${request.headers.get('idempotency-key') ?? ''}`;
    const n = (calls.get(name) ?? 0) + 1;
    calls.set(name, n);
    return n;
  };
  let orders = 0;
  route('POST', '/orders', async (request) => {
    const { item, amount } = (await request.json()) as { item: string; amount: number };
    const orderId = `ord_${++orders}`;
    return json({ orderId, item, amount, n: count('/orders', request) }, 201, { location: `/orders/${orderId}` });
  });
  route('POST', '/orders/:id/charge', (request, { params }) =>
    json({ orderId: params.id, charged: true, n: count('/orders/:id/charge', request) }),
  );
  route('POST', '/payments/declined', (request) =>
    json({ error: 'card_declined', n: count('/payments/declined', request) }, 402),
  );
  route('POST', '/flaky', (request) => json({ error: 'upstream', n: count('/flaky', request) }, 503));
  route('POST', '/throws', (request) => {
    count('/throws', request);
    throw new Error('handler failed');
  });
  route('POST', '/slow', async (request) => {
    const n = count('/slow', request);
    await new Promise((r) => setTimeout(r, 300));
    return json({ done: true, n });
  });
  route('POST', '/stream', (request) => {
    count('/stream', request);
    const encoder = new TextEncoder();
    let i = 0;
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        if (i === 3) return controller.close();
        controller.enqueue(encoder.encode(`data: ${i++}\n\n`));
        await new Promise((r) => setTimeout(r, 10));
      },
    });
    return new Response(body, { headers: { 'content-type': 'text/event-stream' } });
  });
  route('POST', '/blob', async (request) => {
    const { bytes } = (await request.json()) as { bytes: number };
    count('/blob', request);
    return new Response(blob(bytes), { headers: { 'content-type': 'application/octet-stream' } });
  });
  route('POST', '/big', (request) => json({ n: count('/big', request), blob: 'x'.repeat(2 * 1024 * 1024) }));
  route('GET', '/orders/:id', (_request, { params }) => json({ orderId: params.id }));
  route('PATCH', '/orders/:id', (request, { params }) =>
    json({ orderId: params.id, patched: true, n: count('/orders/:id', request) }),
  );

  /** The app's one fetch handler: finds the route, answers 500 to a handler that throws. */
  const fetch = async (request: Request): Promise<Response> => {
    const { pathname } = new URL(request.url);
    for (const { method, match, handler } of routes) {
      const found = request.method === method ? match.exec(pathname) : null;
      if (!found) continue;
      try {
        return await handler(request, { params: { ...found.groups } });
      } catch {
        return json({ error: 'internal' }, 500);
      }
    }
    return json({ error: 'not found' }, 404);
  };
  return { fetch, calls };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const once = await createOncely({ store: sqliteStore({ path: './.oncely/example-fetch.db' }) });
  const { fetch } = createApp({ once });
  const port = Number(process.env.PORT ?? 3004);
  serve({ fetch, port }, () => console.log(`fetch example on http://localhost:${port}`));
}
