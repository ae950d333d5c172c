import { createHash } from 'node:crypto';
import type { ServerType } from '@hono/node-server';
import type { Hono } from 'hono';
import type { Clock } from '../core/clock.js';
import { toMs } from '../core/duration.js';
import { ERRORS, OncelyError } from '../core/errors.js';
import { Metrics } from '../core/metrics.js';
import { Observer } from '../core/observer.js';
import { loadPeer } from '../core/peer.js';
import { contextFromHeaders, endSpan, startSpan, withContext } from '../core/tracing.js';
import { dashboardShell } from '../dashboard/shell.js';
import { migrate as migrateTables, migrationLock } from '../db/migrate.js';
import type { Db } from '../db/types.js';
import { type ClaimIn, createOncely, type Oncely } from '../engine/engine.js';
import type { TestHooks } from '../engine/hooks.js';
import type { ReconcileOptions, ReconcileReport } from '../engine/reconcile.js';
import { createFlows, type Flows } from '../flows/flows.js';
import { traceIdOf } from '../http/header.js';
import type { HttpResponse } from '../http/response.js';
import { adminRoutes } from '../ops/admin.js';
import { adminMigrations } from '../ops/admin-audit.js';
import { adminToken } from '../ops/admin-auth.js';
import {
  type DuplicateScan,
  DuplicateScanner,
  duplicatesMigrations,
  resolveEffects,
  type ScanTarget,
} from '../ops/duplicates.js';
import { type PurgeReport, purge, retentionSettings } from '../ops/retention.js';
import { type Scheduled, schedule } from '../ops/schedule.js';
import { sampleEveryMinute, seriesMigrations } from '../ops/series.js';
import type { RecordStore } from '../store.js';
import type { App } from './app.js';
import { byteLimit, DEFAULT_MAX_BODY_BYTES, readBodyCapped } from './body.js';
import { type BrokerStatus, hostBrokers } from './brokers.js';
import { eventSettings } from './config.js';
import { bindConsumer } from './consume.js';
import { type ConsumerBinding, EventQueue } from './events.js';
import { envelope, Invoker } from './invoke.js';
import { type OutboxMessage, OutboxRelay } from './outbox.js';
import { outboxMigrations } from './outbox-sql.js';
import { hostReconcile, reconcileSettings, registerReconcilers } from './reconciler.js';
import { migrateRecords } from './records.js';
import { type RouteIndex, routeIndex } from './routes.js';
import { type AppSchema, checkStampColumns, readSchema } from './schema.js';
import { type HostStats, hostStats, statsJson } from './stats.js';
import { Totals } from './totals.js';
import { readWebhook, validateSources } from './webhooks.js';

/** A running app: its HTTP routes, event consumers and outbox relay on one database. */
export interface Host {
  /** The HTTP app (Hono): `/v1/invoke/:handler`, `/v1/webhooks/:source`, `/v1/health`, `/v1/events/stats`, `/v1/stats`, `/metrics`. */
  readonly http: Hono;
  readonly once: Oncely;
  /** This host's metrics (what `GET /metrics` answers); its database totals are in `totals`. */
  readonly metrics: Metrics;
  /** Counters summed in the database over every process and restart. */
  readonly totals: Totals;
  /** The totals and the four rates with their targets, as `GET /v1/stats` answers them (after flushing this process's counts). */
  stats(): Promise<HostStats>;
  readonly events: EventQueue;
  readonly relay: OutboxRelay;
  /** Each broker source's and target's state (`GET /v1/brokers`). */
  brokers(): BrokerStatus;
  /** The app's flows (from `flows/*.ts`), run by this host's worker; undefined without a flows folder. */
  readonly flows: Flows | undefined;
  /** What this app serves at `base` (handler routes with curl lines, webhook URLs and signing): `GET /` answers it. */
  routes(base: string, dir?: string): RouteIndex;
  /** Applies oncely's tables and the app's schema.sql (once per version of the file). */
  migrate(): Promise<void>;
  /** One residual-duplicate scan of the config's `effects` (README "Residual-duplicate scans"). */
  scanDuplicates(): Promise<DuplicateScan>;
  /** One retention pass (README "Retention"): removes finished rows past their retention, or counts them with `dryRun`. */
  purge(options?: { dryRun?: boolean }): Promise<PurgeReport>;
  /** One reconcile pass with the app's reconcile functions (README "Reconciliation"); defaults from `config.reconcile`. */
  reconcile(options?: ReconcileOptions): Promise<ReconcileReport>;
  /** Listens on `port` (0 for any) and starts consumers and relay; resolves with the port. */
  start(port: number): Promise<number>;
  /** Graceful stop: no new requests or claims, in-flight work finishes, connections close. */
  stop(): Promise<void>;
}

/** Options of a host beyond its app: the metrics to count into (default a fresh set for this host). */
export interface HostOptions {
  metrics?: Metrics;
  /** The admin API's bearer token; default `ONCELY_ADMIN_TOKEN`; with neither, the admin API answers loopback clients only. */
  adminToken?: string;
  /**
   * The clock of the engine, the flows, the event queue and the outbox relay (a test's manual
   * clock): a failed consumer's retry comes due, and a dead relay's or worker's lease runs out,
   * when the test advances it. The record store keeps its own (SQLite's judges leases by the
   * system clock unless given one; PostgreSQL's and Redis's by their server's). Timers stay real.
   */
  clock?: Clock;
  /** Test only (oncely/testing's crash windows): the engine's and the flows' hooks at each window of each execution and step. */
  hooks?: TestHooks;
}

const APP_SCHEMA_DDL =
  'CREATE TABLE IF NOT EXISTS oncely_app_schema (hash TEXT PRIMARY KEY, applied_at BIGINT NOT NULL)';

/** Builds the host of a loaded app on a database. `store` is the engine's record store on that same database. */
export async function createHost(app: App, db: Db, store: RecordStore, options: HostOptions = {}): Promise<Host> {
  validateSources(app.config);
  const [hono, { serve }] = await loadPeer(
    () => Promise.all([import('hono'), import('@hono/node-server')]),
    'the host',
    ['hono', '@hono/node-server'],
  );
  // Checked now: a bad retention fails at start, not at the first scheduled purge an hour later.
  const retention = retentionSettings(app.config.retention);
  const { duplicateScan } = app.config;
  const scanEveryMs = duplicateScan === false ? null : toMs(duplicateScan?.every ?? '24h', 'duplicateScan.every');
  const reconciling = reconcileSettings(app.config.reconcile);
  const eventsConfig = eventSettings(app.config);
  // Source body limits by name, checked now: a bad one fails at start, not at the first webhook.
  const sourceLimits = new Map(
    Object.entries(app.config.sources ?? {}).map(([name, s]) => [
      name,
      byteLimit(s.maxBodyBytes, `${name}.maxBodyBytes`),
    ]),
  );
  // Its own metrics, not the process's: every count of this host goes to its database's totals.
  const metrics = options.metrics ?? new Metrics();
  // Read once, at creation: a bad token fails the start, not the first admin request.
  const token = adminToken(options.adminToken);
  const { logger, onDecision } = app.config;
  const observer = new Observer({ logger, onDecision, metrics });
  const totals = new Totals(db, metrics);
  // Claim-first writes (effects 'external'): each in a transaction of the Db, on SQLite in its queue.
  const claimIn: ClaimIn = (write) => db.transaction((tx) => write(tx.handle));
  const { clock, hooks } = options;
  const once = await createOncely({ store, tenant: 'default', logger, onDecision, metrics, clock, hooks });
  registerReconcilers(once, app);
  let reconciles: Scheduled | undefined;
  const reconcileOnce = (options: ReconcileOptions = {}) =>
    hostReconcile(db, once, {
      ...(reconciling ? { olderThan: reconciling.olderThanMs, limit: reconciling.limit } : {}),
      ...options,
    });
  let schema: AppSchema | undefined;
  const currentSchema = () => {
    if (!schema) throw new OncelyError('NOT_MIGRATED', 'the host is not migrated yet');
    return schema;
  };

  // Flows share the app's database, so a handler's flows.start commits with the handler.
  const flows =
    app.flows.length > 0
      ? await createFlows({
          db,
          flows: app.flows,
          lease: app.config.flows?.lease,
          logger,
          onDecision,
          metrics,
          clock,
          hooks,
        })
      : undefined;
  const consumerFor = (source: string, type: string): ConsumerBinding | undefined => {
    const consumer = app.consumers.get(`${source}/${type}`);
    return (
      consumer &&
      bindConsumer(source, type, consumer, { once, config: app.config, schema: currentSchema, flows, claimIn, clock })
    );
  };
  const events = new EventQueue(db, {
    consumerFor,
    ...eventsConfig,
    logger,
    observer,
    totals,
    clock,
    // With a logger a conflict is its decision line; without one, the queue's own console line.
    ...(logger ? { onConflict: () => undefined } : {}),
  });
  // The app's own consumers, with the outbox id as the event id: every topic's target unless routed elsewhere.
  const consumers = {
    deliver: async (m: OutboxMessage) =>
      void (await events.intake('outbox', m.id, m.topic, m.payload, undefined, {
        surface: 'outbox',
        traceId: m.traceId,
      })),
  };
  const brokers = await hostBrokers(app.config, { db, events, consumers, logger });
  const relay = new OutboxRelay(db, { lease: eventsConfig.leaseMs, target: brokers.target, totals, clock });

  const invoker = new Invoker(app, {
    totals,
    observer,
    once,
    schema: currentSchema,
    flows,
    afterCommit: () => relay.wake(),
    claimIn,
    clock,
  });

  const stats = async (): Promise<HostStats> => {
    // This process's latest counts first: whichever process answers, the totals include its own.
    await totals.flush();
    return hostStats(totals);
  };
  let scrape: (() => Promise<{ type: string; text: string }>) | undefined;
  const exposition = async () => {
    if (!scrape) {
      // Loaded on the first scrape: a host nobody scrapes never loads prom-client.
      const [{ Registry }, { registerMetrics }] = await Promise.all([
        loadPeer(() => import('prom-client'), 'GET /metrics', ['prom-client']),
        import('../prometheus/index.js'),
      ]);
      const registry = new Registry();
      registerMetrics(registry, metrics);
      scrape = async () => ({ type: registry.contentType, text: await registry.metrics() });
    }
    return scrape();
  };

  const http = new hono.Hono();
  const send = (response: HttpResponse) =>
    new Response(response.body as Uint8Array<ArrayBuffer>, {
      status: response.status,
      headers: response.headers as Record<string, string>,
    });
  // A first visit to the server's root finds what to call, instead of a 404.
  http.get('/', (c) => c.json({ code: 0, data: routeIndex(app, new URL(c.req.url).origin) }));
  http.get('/v1/health', (c) => c.json({ code: 0, data: { ok: true } }));
  http.get('/v1/events/stats', async (c) => c.json({ code: 0, data: await events.stats() }));
  http.get('/v1/brokers', (c) => c.json({ code: 0, data: brokers.status() }));
  // JSON has no NaN: a rate with nothing counted yet is null.
  http.get('/v1/stats', async (c) =>
    c.body(statsJson({ code: 0, data: await stats() }), 200, { 'content-type': 'application/json' }),
  );
  http.route('/v1/admin', adminRoutes({ db, once, events, flows, stats, metrics, token }, hono));
  // The dashboard's pages hold no data: each of its reads is an admin API call, under its protection.
  http.route('/', dashboardShell({ base: '/oncely', api: '/v1/admin' }, hono));
  http.get('/metrics', async (c) => {
    const { type, text } = await exposition();
    return c.body(text, 200, { 'content-type': type });
  });
  // A caller's W3C traceparent: the host's spans of this request are children of the caller's.
  const traced = <T>(request: Request, fn: () => Promise<T>) =>
    withContext(contextFromHeaders(Object.fromEntries(request.headers)), fn);
  http.post('/v1/invoke/:handler', async (c) =>
    send(await traced(c.req.raw, () => invoker.invoke(c.req.param('handler'), c.req.raw))),
  );
  http.post('/v1/webhooks/:source', (c) => traced(c.req.raw, () => webhook(c.req.param('source'), c.req.raw)));
  const webhook = async (name: string, request: Request) => {
    // Own keys only: `__proto__` or `toString` must be unknown sources, not Object.prototype's members.
    const sources = app.config.sources ?? {};
    const source = Object.hasOwn(sources, name) ? sources[name] : undefined;
    if (!source)
      return send(
        envelope(ERRORS.SOURCE_UNKNOWN.status, {
          error: { code: 'SOURCE_UNKNOWN', message: `no webhook source ${name}` },
        }),
      );
    // Capped before the signature check: an unsigned body costs at most the source's limit.
    const limit = sourceLimits.get(name) ?? DEFAULT_MAX_BODY_BYTES;
    const capped = await readBodyCapped(request, limit);
    if (!capped.ok)
      return send(
        envelope(ERRORS.REQUEST_TOO_LARGE.status, {
          error: { code: 'REQUEST_TOO_LARGE', message: `request body is over ${limit} bytes` },
        }),
      );
    const body = capped.body;
    const read = readWebhook(source, Object.fromEntries(request.headers), body);
    if (!read.ok) return send(envelope(read.status, { error: { code: read.code, message: read.message } }));
    // Persisted before the answer: a 2xx means the event survives a crash from here on.
    // A span of the intake, in the caller's trace when it sent a traceparent.
    const span = startSpan(observer.activeTracer, 'oncely.intake', {
      'oncely.source': name,
      'oncely.type': read.type,
      'oncely.event_id': read.id,
    });
    let outcome: Awaited<ReturnType<EventQueue['intake']>>;
    try {
      outcome = await events.intake(name, read.id, read.type, read.data, undefined, {
        traceId: traceIdOf(request.headers),
      });
    } catch (error) {
      endSpan(span, {}, error);
      throw error;
    }
    endSpan(span, { 'oncely.outcome': outcome });
    // A conflict (same id, another body) is still 2xx: the sender's retries would not change the stored event.
    const duplicate = outcome !== 'accepted';
    return Response.json({ code: 0, data: { id: read.id, outcome, duplicate, conflict: outcome === 'conflict' } });
  };

  let server: ServerType | undefined;
  let closing = false;
  // Resolved against the schema each migrate reads: statements name only tables and columns found there.
  let effects: ScanTarget[] = [];
  const scanner = new DuplicateScanner(db, totals, () => effects, { logger });
  let scans: Scheduled | undefined;
  let purges: Scheduled | undefined;
  let samples: Scheduled | undefined;
  // Aborted by stop(): a pass under way ends after its current batch, not after its last table.
  const stopping = new AbortController();
  const purgeOnce = (options: { dryRun?: boolean } = {}) =>
    purge(db, retention, { dryRun: options.dryRun, records: store, metrics, signal: stopping.signal });
  const migrate = async () => {
    const hash = createHash('sha256').update(app.schemaSql).digest('hex');
    await migrateRecords(store);
    await migrateTables(db, outboxMigrations);
    await migrateTables(db, duplicatesMigrations);
    await migrateTables(db, adminMigrations);
    await migrateTables(db, seriesMigrations);
    await db.transaction(async (tx) => {
      // One migrator at a time across processes: SQLite's write lock, PostgreSQL's advisory lock.
      await migrationLock(tx);
      await tx.run(APP_SCHEMA_DDL);
      const seen = await tx.all('SELECT hash FROM oncely_app_schema WHERE hash = ?', [hash]);
      if (seen.length === 0 && app.schemaSql.trim() !== '') {
        if (tx.dialect === 'sqlite') (tx.handle as { exec(sql: string): void }).exec(app.schemaSql);
        else await tx.run(app.schemaSql);
        await tx.run('INSERT INTO oncely_app_schema (hash, applied_at) VALUES (?, ?)', [hash, Date.now()]);
      }
      // Inside the transaction: a refused column rolls the new schema back, so fixing the file is enough.
      checkStampColumns(await readSchema(tx, db.schema ? { schema: db.schema } : undefined));
    });
    await events.migrate();
    const read = await readSchema(db, db.schema ? { schema: db.schema } : undefined);
    // Before `schema` is set: a bad table or column fails the start, not the first scan a day later.
    effects = resolveEffects(read, app.config.effects);
    schema = read;
  };
  return {
    http,
    once,
    metrics,
    totals,
    stats,
    events,
    relay,
    brokers: () => brokers.status(),
    flows,
    migrate,
    scanDuplicates: async () => {
      currentSchema();
      return scanner.scan();
    },
    purge: purgeOnce,
    reconcile: reconcileOnce,
    routes: (base, dir) => routeIndex(app, base, dir),
    async start(port) {
      if (!schema) await migrate();
      events.start();
      relay.start();
      totals.start();
      await brokers.start();
      await flows?.startWorker();
      // A first pass within a minute: a process restarted more often than `every` still purges.
      if (retention.scheduled)
        purges = schedule('retention', retention.everyMs, () => purgeOnce(), {
          logger,
          firstAfterMs: Math.min(retention.everyMs, 60_000),
        });
      // The dashboard's charts: the rates' totals once a minute.
      samples = sampleEveryMinute(db, async () => (await stats()).rateTotals, { logger });
      if (reconciling) reconciles = schedule('reconcile', reconciling.everyMs, () => reconcileOnce(), { logger });
      // The first scan soon after start: a process restarted more often than `every` still scans.
      if (scanEveryMs !== null && effects.length > 0)
        scans = schedule('duplicate scan', scanEveryMs, () => scanner.scan(), {
          logger,
          firstAfterMs: Math.min(scanEveryMs, 60_000),
        });
      return new Promise<number>((resolve, reject) => {
        server = serve({ fetch: http.fetch, port, hostname: '0.0.0.0' }, (info) => resolve(info.port));
        // close() ends idle keep-alive connections only: a client (a load balancer's health check)
        // that keeps one busy would keep the host from stopping. Once stopping, each answer closes its
        // connection instead.
        server.prependListener('request', (_request: unknown, response: { shouldKeepAlive: boolean }) => {
          if (closing) response.shouldKeepAlive = false;
        });
        // A port in use is an answer for the person starting the host, not an unhandled 'error' event.
        server.once('error', (error: NodeJS.ErrnoException) =>
          reject(
            new OncelyError(
              'LISTEN_FAILED',
              error.code === 'EADDRINUSE'
                ? `port ${port} is in use: stop what listens there, or pass --port <another port>`
                : `cannot listen on port ${port}: ${error.message}`,
            ),
          ),
        );
      });
    },
    async stop() {
      closing = true;
      await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
      await scans?.stop();
      await samples?.stop();
      // A purge under way ends its batch first: the database closes below.
      stopping.abort();
      await purges?.stop();
      // A pass under way settles its record before the database closes.
      await reconciles?.stop();
      await events.stop();
      await relay.stop();
      // After the relay (which delivers to the targets); the sources' batches in flight finish first.
      await brokers.stop();
      await flows?.stop();
      // After everything that counts has stopped; a database already gone loses at most the last second.
      await totals.stop().catch(() => undefined);
      await once.close();
      await db.close();
    },
  };
}
