/**
 * The `POST /orders` route of examples/express.ts, examples/fastify.ts and examples/hono.ts, built
 * twice per framework: bare, and with the Idempotency-Key middleware configured as the examples do
 * (`{ once, tenant: x-account }`, mounted the same way). One factory builds both, so the handler
 * is the same code in both apps and only the middleware differs between "bare" and "unique/replay".
 * The adapters come from `oncely/...`: in the bench's server child that is the built package in
 * dist (see SERVER_TSCONFIG in bench/http.ts; npm run bench builds it first), as in an installed app.
 */
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import Router from '@koa/router';
import express, { type NextFunction, type Request, type RequestHandler, type Response } from 'express';
import Fastify, { type FastifyRequest } from 'fastify';
import { type Context, Hono } from 'hono';
import Koa, { type Context as KoaContext, type Next } from 'koa';
import type { Oncely } from 'oncely';
import { idempotency as expressIdempotency } from 'oncely/express';
import { idempotency as fastifyIdempotency } from 'oncely/fastify';
import { idempotent } from 'oncely/fetch';
import { idempotency as honoIdempotency } from 'oncely/hono';
import { idempotency as koaIdempotency } from 'oncely/koa';
import { startNest, startNestFloor } from './http-nest.js';

/**
 * Each framework's app, bare or behind its adapter: a new adapter is one row here (and its start
 * function below); every row runs on every store and gets the middleware's own-CPU targets. A
 * `floor` is the bare app behind the framework's own no-op hook where the adapter must use a hook
 * that costs something by itself (Nest's interceptors), measured beside bare.
 */
const APPS = {
  express: { start: startExpress, heavy: true },
  fastify: { start: startFastify, heavy: false },
  hono: { start: startHono, heavy: false },
  fetch: { start: startFetch, heavy: false },
  koa: { start: startKoa, heavy: true },
  nestjs: { start: startNest, heavy: true, floor: startNestFloor },
} satisfies Record<
  string,
  { start: (once: Oncely | undefined) => Promise<RunningApp>; heavy: boolean; floor?: () => Promise<RunningApp> }
>;

export type Framework = keyof typeof APPS;
export const FRAMEWORKS = Object.keys(APPS) as Framework[];

/**
 * Whether the looser own-CPU target applies (40 µs: Express, Koa, NestJS, whose request
 * and response objects cost more to wrap) rather than the strict one (15/20 µs: Fastify, Hono, fetch).
 */
export const heavyFramework = (framework: Framework): boolean => APPS[framework].heavy;

/** Tenant every benchmark request carries in x-account, so the middleware's tenant path runs too. */
export const HTTP_TENANT = 'bench';

/** A listening app on 127.0.0.1. */
export interface RunningApp {
  port: number;
  close(): Promise<void>;
}

/**
 * The examples count handler runs per route and key (their tests read it); kept here so the
 * handler does the same work as the example's, in both apps.
 */
export function counter() {
  const calls = new Map<string, number>();
  return (name: string) => {
    const n = (calls.get(name) ?? 0) + 1;
    calls.set(name, n);
    return n;
  };
}

/** Starts `framework`'s floor app; undefined for a framework without one. */
export async function startFloor(framework: Framework): Promise<RunningApp | undefined> {
  const app = APPS[framework];
  return 'floor' in app ? app.floor() : undefined;
}

/** Builds and starts `framework`'s orders app; with `once`, behind the middleware. */
export function startApp(framework: Framework, once: Oncely | undefined): Promise<RunningApp> {
  return APPS[framework].start(once);
}

function startExpress(once: Oncely | undefined): Promise<RunningApp> {
  // As in the example: mounted on the route, so the action is the route pattern.
  return startExpressWith(once ? [expressIdempotency({ once, tenant: (req) => req.get('x-account') })] : []);
}

/**
 * The Express orders app with `guards` mounted on the route before the handler (the peers of
 * bench/http-peers.ts use it too). `answered`: the request was answered before the handler
 * (express-idempotency calls next() after sending a replay, and documents this check).
 */
export async function startExpressWith(
  guards: RequestHandler[],
  answered: (req: Request) => boolean = () => false,
): Promise<RunningApp> {
  const count = counter();
  let orders = 0;
  const app = express();
  app.use(express.json());
  app.post('/orders', ...guards, (req: Request, res: Response) => {
    if (answered(req)) return;
    const { item, amount } = req.body as { item: string; amount: number };
    const orderId = `ord_${++orders}`;
    res
      .status(201)
      .location(`/orders/${orderId}`)
      .json({ orderId, item, amount, n: count(`${req.baseUrl}${req.route.path} ${req.get('idempotency-key') ?? ''}`) });
  });
  app.use(
    (
      error: { status?: number; expose?: boolean; message?: string },
      _req: Request,
      res: Response,
      _next: NextFunction,
    ) => {
      res.status(error.status ?? 500).json({ error: error.expose ? error.message : 'internal' });
    },
  );
  const server = await new Promise<import('node:http').Server>((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  return { port: (server.address() as AddressInfo).port, close: () => closeServer(server) };
}

async function startFastify(once: Oncely | undefined): Promise<RunningApp> {
  const count = counter();
  let orders = 0;
  const app = Fastify();
  // As in the example: registered on the root scope before the routes.
  if (once) {
    const header = (req: FastifyRequest, name: string) => {
      const value = req.headers[name];
      return typeof value === 'string' ? value : undefined;
    };
    app.register(fastifyIdempotency, { once, tenant: (req) => header(req, 'x-account') });
  }
  app.post('/orders', async (req, reply) => {
    const { item, amount } = req.body as { item: string; amount: number };
    const orderId = `ord_${++orders}`;
    reply.code(201).header('location', `/orders/${orderId}`);
    return { orderId, item, amount, n: count(`${req.routeOptions.url} ${req.headers['idempotency-key'] ?? ''}`) };
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  return { port: (app.server.address() as AddressInfo).port, close: () => app.close() };
}

async function startHono(once: Oncely | undefined): Promise<RunningApp> {
  const count = counter();
  let orders = 0;
  const app = new Hono();
  // As in the example: one app-wide middleware; the action is each route's pattern.
  if (once) app.use('*', honoIdempotency({ once, tenant: (c) => c.req.header('x-account') }));
  app.onError((_error, c) => c.json({ error: 'internal' }, 500));
  app.post('/orders', async (c: Context) => {
    const { item, amount } = await c.req.json<{ item: string; amount: number }>();
    const orderId = `ord_${++orders}`;
    c.header('Location', `/orders/${orderId}`);
    return c.json(
      { orderId, item, amount, n: count(`${c.req.routePath} ${c.req.header('idempotency-key') ?? ''}`) },
      201,
    );
  });
  let server!: ReturnType<typeof serve>;
  const port = await new Promise<number>((resolve) => {
    server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, (info) => resolve(info.port));
  });
  return { port, close: () => closeServer(server as import('node:http').Server) };
}

async function startFetch(once: Oncely | undefined): Promise<RunningApp> {
  const count = counter();
  let orders = 0;
  const create = async (request: globalThis.Request) => {
    const { item, amount } = (await request.json()) as { item: string; amount: number };
    const orderId = `ord_${++orders}`;
    const n = count(`/orders ${request.headers.get('idempotency-key') ?? ''}`);
    return Response.json({ orderId, item, amount, n }, { status: 201, headers: { location: `/orders/${orderId}` } });
  };
  // As in the example: one wrapped handler per route, with its pattern as the route.
  const tenant = (request: globalThis.Request) => request.headers.get('x-account') ?? undefined;
  const route = once ? idempotent(create, { once, route: '/orders', tenant }) : create;
  const app = (request: globalThis.Request) =>
    request.method === 'POST' && new URL(request.url).pathname === '/orders'
      ? route(request)
      : new Response(null, { status: 404 });
  let server!: ReturnType<typeof serve>;
  const port = await new Promise<number>((resolve) => {
    server = serve({ fetch: app, port: 0, hostname: '127.0.0.1' }, (info) => resolve(info.port));
  });
  return { port, close: () => closeServer(server as import('node:http').Server) };
}

/** What @koa/bodyparser does for the bare Koa app: the middleware reads and parses the body itself. */
async function koaJson(ctx: KoaContext, next: Next): Promise<void> {
  const chunks: Buffer[] = [];
  for await (const chunk of ctx.req) chunks.push(chunk as Buffer);
  (ctx.request as { body?: unknown }).body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  await next();
}

async function startKoa(once: Oncely | undefined): Promise<RunningApp> {
  const count = counter();
  let orders = 0;
  const app = new Koa();
  const router = new Router();
  // As in the example: on each route, so the action is its pattern; it leaves the parsed body on ctx.request.
  const guard = once ? koaIdempotency({ once, tenant: (ctx) => ctx.get('x-account') || undefined }) : koaJson;
  router.post('/orders', guard, (ctx) => {
    const { item, amount } = (ctx.request as { body?: unknown }).body as { item: string; amount: number };
    const orderId = `ord_${++orders}`;
    ctx.status = 201;
    ctx.set('Location', `/orders/${orderId}`);
    ctx.body = { orderId, item, amount, n: count(`${String(ctx._matchedRoute)} ${ctx.get('idempotency-key')}`) };
  });
  app.use(router.routes());
  const server = await new Promise<import('node:http').Server>((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  return { port: (server.address() as AddressInfo).port, close: () => closeServer(server) };
}

/** Closes a node http server, keep-alive connections included (autocannon leaves none, but a crash might). */
function closeServer(server: import('node:http').Server): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
}
