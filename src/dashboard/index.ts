/**
 * The dashboard in your own server: `dashboard({ db | url, token, basePath })` is a fetch-style
 * handler serving the pages and the admin API they call (under `<basePath>/api`) over an oncely
 * database, with the admin API's protection (a bearer token, or loopback clients only). Thin
 * adapters mount it in Hono, Express and Fastify through @hono/node-server's request listener.
 * @example app.use(dashboardExpress({ url: process.env.DATABASE_URL, token: process.env.ONCELY_ADMIN_TOKEN }))
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Hono } from 'hono';
import { Metrics } from '../core/metrics.js';
import { loadPeer, requirePeer } from '../core/peer.js';
import { openDb } from '../db/index.js';
import type { Db } from '../db/types.js';
import { createOncely } from '../engine/engine.js';
import { createFlows } from '../flows/flows.js';
import { EventQueue } from '../host/events.js';
import { migrateRecords, recordStoreFor } from '../host/records.js';
import { hostStats } from '../host/stats.js';
import { Totals } from '../host/totals.js';
import { adminRoutes } from '../ops/admin.js';
import { migrateAdmin } from '../ops/admin-audit.js';
import { adminToken } from '../ops/admin-auth.js';
import { migrateSeries, sampleEveryMinute } from '../ops/series.js';
import { checkShellPaths, dashboardShell } from './shell.js';

/** Where the dashboard reads, who may use it, and where it is mounted. */
export interface DashboardOptions {
  /** An open oncely database (left open by close()); or `url`. */
  db?: Db;
  /** A SQLite path or a postgres:// URL, opened on the first request. */
  url?: string;
  /** The admin token; default `ONCELY_ADMIN_TOKEN`; with neither, loopback clients only. */
  token?: string;
  /** The path the pages answer at; default `/oncely`. The API is `<basePath>/api`. */
  basePath?: string;
  /** Whether this process samples the rates once a minute for the charts; default false (`oncely serve` does). */
  sample?: boolean;
}

/** A fetch-style handler; `env` is @hono/node-server's `{ incoming }` (how loopback clients are told apart). */
export interface DashboardHandler {
  (request: Request, env?: unknown): Promise<Response>;
  /** Stops the sampler, and closes the database it opened from `url`. */
  close(): Promise<void>;
  /** The mount path, as given or defaulted. */
  readonly basePath: string;
}

/** The dashboard as a fetch-style handler: answers the paths under `basePath`, 404 elsewhere. */
export function dashboard(options: DashboardOptions): DashboardHandler {
  if (!options.db === !options.url) throw new TypeError('dashboard needs one of { db } or { url }');
  const basePath = (options.basePath ?? '/oncely').replace(/\/+$/, '');
  // Checked now, as the shell checks it: a bad path fails where the server is built.
  const paths = { base: basePath, api: `${basePath}/api` };
  checkShellPaths(paths);
  // Read now: a bad token fails where the server is built, not at the first request.
  const token = adminToken(options.token);
  let stopSampling: (() => Promise<void>) | undefined;
  const built = (async () => {
    const hono = await loadPeer(() => import('hono'), 'the dashboard', ['hono']);
    const db = options.db ?? (await openDb(options.url as string));
    const metrics = new Metrics();
    const totals = new Totals(db, metrics);
    const store = recordStoreFor(db);
    await migrateRecords(store);
    await migrateAdmin(db);
    await migrateSeries(db);
    // Replays put dead letters back as pending; the app's own host consumes them.
    const events = new EventQueue(db, { consumerFor: () => undefined });
    await events.migrate();
    const once = await createOncely({ store, tenant: 'default', metrics });
    // No definitions: flows are shown, retried and cancelled by id; the app's worker runs them.
    const flows = await createFlows({ db, flows: [], metrics });
    const stats = async () => {
      await totals.flush();
      return hostStats(totals);
    };
    if (options.sample) stopSampling = sampleEveryMinute(db, async () => (await stats()).rateTotals).stop;
    const app = new hono.Hono();
    app.route(paths.api, adminRoutes({ db, once, events, flows, stats, metrics, token }, hono));
    app.route('/', dashboardShell(paths, hono));
    return { app, db, once, totals };
  })();
  built.catch(() => undefined);
  const handler = (async (request: Request, env?: unknown) =>
    (await built).app.fetch(request, env)) as DashboardHandler;
  handler.close = async () => {
    await stopSampling?.();
    const { db, once, totals } = await built;
    await totals.flush().catch(() => undefined);
    await once.close();
    if (!options.db) await db.close();
  };
  Object.defineProperty(handler, 'basePath', { value: basePath });
  return handler;
}

/** For Hono: `app.route('/', dashboardHono({ ... }))`; answers `<basePath>` and everything under it. */
export function dashboardHono(options: DashboardOptions | DashboardHandler): Hono {
  // Synchronous, as the Hono app is handed back now; whoever mounts it has hono installed.
  const { Hono } = requirePeer<typeof import('hono')>('hono', 'dashboardHono');
  const handler = typeof options === 'function' ? options : dashboard(options);
  const app = new Hono();
  const pass = (c: { req: { raw: Request }; env: unknown }) => handler(c.req.raw, c.env);
  app.all(handler.basePath, pass);
  app.all(`${handler.basePath}/*`, pass);
  return app;
}

/** For Node servers and Express: a request listener that answers under `basePath` and calls `next` elsewhere. */
export function dashboardExpress(
  options: DashboardOptions | DashboardHandler,
): (req: IncomingMessage, res: ServerResponse, next?: (error?: unknown) => void) => void {
  const handler = typeof options === 'function' ? options : dashboard(options);
  const listening = loadPeer(() => import('@hono/node-server'), 'dashboardExpress', ['@hono/node-server']).then(
    ({ getRequestListener }) => getRequestListener(handler),
  );
  listening.catch(() => undefined); // answered at the first request under basePath
  const base = handler.basePath;
  return (req, res, next) => {
    // originalUrl: Express rewrites req.url under a mount path; the dashboard answers whole paths.
    const url = (req as { originalUrl?: string }).originalUrl ?? req.url ?? '/';
    const path = url.split('?')[0] ?? '/';
    if (path === base || path.startsWith(`${base}/`)) {
      req.url = url;
      listening.then(
        (listener) => listener(req, res),
        (error: Error) => (next ? next(error) : res.writeHead(500).end(error.message)),
      );
    } else if (next) next();
    else res.writeHead(404).end();
  };
}

/** The few Fastify members the plugin uses (declared, not imported: fastify stays an optional peer). */
interface FastifyLike {
  addContentTypeParser(type: string, fn: (req: unknown, payload: unknown, done: (err: null) => void) => void): void;
  removeAllContentTypeParsers(): void;
  all(
    path: string,
    handler: (req: { raw: IncomingMessage }, reply: { raw: ServerResponse; hijack(): void }) => void,
  ): void;
  addHook(name: 'onClose', fn: () => Promise<void>): void;
}

/**
 * For Fastify: `await app.register(dashboardFastify({ ... }))`. The body is left unread for the
 * admin API, which reads it with its own size cap; the plugin's scope (Fastify encapsulates a
 * registered plugin) keeps that parser from the app's other routes.
 */
export function dashboardFastify(options: DashboardOptions | DashboardHandler): (app: FastifyLike) => Promise<void> {
  const handler = typeof options === 'function' ? options : dashboard(options);
  const plugin = async (app: FastifyLike) => {
    const { getRequestListener } = await loadPeer(() => import('@hono/node-server'), 'dashboardFastify', [
      '@hono/node-server',
    ]);
    const listener = getRequestListener(handler);
    app.removeAllContentTypeParsers();
    app.addContentTypeParser('*', (_req, _payload, done) => done(null));
    const pass = (req: { raw: IncomingMessage }, reply: { raw: ServerResponse; hijack(): void }) => {
      reply.hijack();
      void listener(req.raw, reply.raw);
    };
    app.all(handler.basePath, pass);
    app.all(`${handler.basePath}/*`, pass);
    app.addHook('onClose', () => handler.close());
  };
  return plugin;
}
