/**
 * The admin HTTP API of `oncely serve` under `/v1/admin`: stats, records, events and dead letters,
 * flows, approvals, credits and open reservations, duplicate findings and its own audit. Every request is checked by
 * admin-auth.ts first, counted in `oncely_admin_actions_total{action,outcome}`, and every change is
 * written to the audit table (admin-audit.ts) before it runs and after it ends.
 */
import type { Context, Hono } from 'hono';
import { decideApproval, getApproval } from '../agent/approvals.js';
import { type ErrorCode, OncelyError } from '../core/errors.js';
import type { Metrics } from '../core/metrics.js';
import { recordRef } from '../core/record.js';
import type { Db } from '../db/types.js';
import type { Oncely } from '../engine/engine.js';
import type { Flows } from '../flows/flows.js';
import { DEFAULT_MAX_BODY_BYTES, readBodyCapped } from '../host/body.js';
import type { EventQueue } from '../host/events.js';
import { storedResolution } from '../host/reconciler.js';
import type { HostStats } from '../host/stats.js';
import { AdminAudit } from './admin-audit.js';
import {
  type AdminIdentity,
  checkAccess,
  crossSite,
  hostName,
  isLoopback,
  settlerName,
  tokenDigest,
} from './admin-auth.js';
import {
  answer,
  bodyObject,
  cursorOf,
  failureOf,
  idOf,
  jsonTypeOf,
  limitOf,
  nameOf,
  olderThanOf,
  oneOf,
  onlyFields,
  readQuery,
  refOf,
  replayOf,
  resolutionOf,
  textField,
} from './admin-input.js';
import {
  APPROVAL_STATUSES,
  EVENT_STATUSES,
  FLOW_STATUSES,
  hasTable,
  listApprovalRows,
  listCredits,
  listDeadLetters,
  listEvents,
  listFlowRuns,
  listReservations,
} from './admin-lists.js';
import { withTimeline } from './admin-timeline.js';
import { listFindings } from './duplicates.js';
import { overview } from './overview.js';
import { storedResult } from './record-result.js';
import { readSeries, SAMPLE_EVERY_MS, SERIES_WINDOWS } from './series.js';

/** What the admin API reads and changes: the host's own parts. */
export interface AdminDeps {
  /** The host's database: the audit, events, flows and agent tables. */
  db: Db;
  /** The host's engine: records on PostgreSQL (on SQLite an engine of a connection of its own). */
  once: Oncely;
  /** Dead letters are replayed through it, so the queue wakes and counts the replays. */
  events: EventQueue;
  /** The app's flows; undefined without a flows folder (their routes then find no flow). */
  flows: Flows | undefined;
  /** What `GET /v1/stats` answers. */
  stats(): Promise<HostStats>;
  /** Where `oncely_admin_actions_total` is counted (the host's metrics, flushed to its totals). */
  metrics: Metrics;
  /** The bearer token (adminToken()); undefined answers loopback clients only. */
  token: string | undefined;
  /** Largest request body read; default the host's 1 MiB. */
  maxBodyBytes?: number;
}

const RECORD_STATES = ['in_progress', 'succeeded', 'failed', 'released', 'unknown'] as const;

/** A change a route makes once its input is checked: what it acts on, what was asked, and the change itself. */
interface Change {
  target: string;
  detail: unknown;
  run(): Promise<unknown>;
}

interface Req {
  c: Context;
  identity: AdminIdentity;
  query: (names: readonly string[]) => Map<string, string>;
}

/** A refusal found after the change ran (its state did not allow it): answered and audited as `refused`. */
function refuse(code: ErrorCode, message: string): never {
  throw new OncelyError(code, message);
}

/**
 * The admin routes, to mount with `http.route('/v1/admin', adminRoutes(deps, hono))`, on the hono
 * module the caller loaded (an optional peer). Run `migrateAdmin(db)` first (the host's migrate
 * does): the audit table must exist.
 */
export function adminRoutes(deps: AdminDeps, hono: typeof import('hono')): Hono {
  const { db, once, events, flows, metrics } = deps;
  // On SQLite the host's record store uses the Db's one connection outside its queue, where a
  // resolve could land inside (or roll back with) a handler's open transaction; a second connection
  // would wait on that transaction's lock with the event loop blocked. So records are read and
  // settled inside a transaction of the Db's queue, where no handler's is open.
  const onRecords = <T>(fn: (tx?: unknown) => Promise<T>): Promise<T> =>
    db.dialect === 'sqlite' ? db.transaction((tx) => fn(tx.handle)) : fn();
  const audit = new AdminAudit(db);
  const expected = tokenDigest(deps.token);
  const maxBodyBytes = deps.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  const count = (action: string, outcome: 'done' | 'refused' | 'denied' | 'failed') =>
    metrics.add('oncely_admin_actions_total', [action, outcome]);

  /** Checks who asks; answers the refusal, or the request with its identity. */
  const admit = (c: Context, action: string): Req | Response => {
    const remote = (c.env as { incoming?: { socket?: { remoteAddress?: string } } } | undefined)?.incoming?.socket
      ?.remoteAddress;
    const access = checkAccess(expected, c.req.raw.headers, remote);
    if (!access.ok) {
      count(action, access.code === 'INVALID_ARGUMENT' ? 'refused' : 'denied');
      const headers: Record<string, string> =
        access.status === 401 ? { 'www-authenticate': 'Bearer realm="oncely-admin"' } : {};
      return answer(access.status, { error: { code: access.code, message: access.message } }, headers);
    }
    // Loopback only: a page on another site that resolves its name to 127.0.0.1 (DNS rebinding)
    // reaches this socket too, but names its own host.
    if (!expected && !isLoopback(hostName(c.req.header('host')))) {
      count(action, 'denied');
      return answer(403, {
        error: { code: 'ADMIN_FORBIDDEN', message: 'with no ONCELY_ADMIN_TOKEN set, call the admin API as localhost' },
      });
    }
    // A page of another site, open in a browser on this machine, sends from loopback: the address
    // check lets it in. What the browser says of that page's site is refused here, token or not,
    // before the body is read.
    const foreign = crossSite(c.req.method, c.req.raw.headers);
    if (foreign) {
      count(action, 'denied');
      return answer(403, {
        error: { code: 'ADMIN_CROSS_SITE', message: `a page of another site may not change anything: ${foreign}` },
      });
    }
    return { c, identity: access.identity, query: (names) => readQuery(c.req.url, names) };
  };

  /** A change's body: JSON by its Content-Type (checked before a byte is read), a JSON object, capped. */
  const bodyOf = async (c: Context): Promise<Record<string, unknown>> => {
    jsonTypeOf(c.req.header('content-type'));
    const read = await readBodyCapped(c.req.raw, maxBodyBytes);
    if (!read.ok) throw new OncelyError('REQUEST_TOO_LARGE', `request body is over ${maxBodyBytes} bytes`);
    return bodyObject(read.body);
  };

  const app = new hono.Hono();
  /** A route that only reads. */
  const read = (path: string, action: string, fn: (req: Req) => Promise<unknown>) =>
    app.get(path, async (c) => {
      const req = admit(c, action);
      if (req instanceof Response) return req;
      try {
        const data = await fn(req);
        count(action, 'done');
        return answer(200, { data });
      } catch (error) {
        const failure = failureOf(error);
        count(action, failure.status >= 500 ? 'failed' : 'refused');
        return answer(failure.status, { error: failure.error });
      }
    });
  /** A route that changes something: checked, its JSON body read, audited before and after, counted. */
  const change = (path: string, action: string, plan: (req: Req, body: Record<string, unknown>) => Promise<Change>) =>
    app.post(path, async (c) => {
      const req = admit(c, action);
      if (req instanceof Response) return req;
      let planned: Change;
      try {
        planned = await plan(req, await bodyOf(c));
      } catch (error) {
        const failure = failureOf(error);
        count(action, failure.status >= 500 ? 'failed' : 'refused');
        // Refused before anything ran; still audited (a person tried), unless the audit itself fails.
        await audit
          .refused(req.identity, action, c.req.path.slice(0, 500), { error: failure.error })
          .catch(() => undefined);
        return answer(failure.status, { error: failure.error });
      }
      let id: number;
      try {
        id = await audit.begin(req.identity, action, planned.target, planned.detail);
      } catch (error) {
        // Nothing changes that the audit cannot record.
        count(action, 'failed');
        return answer(503, { error: failureOf(error).error });
      }
      let data: unknown;
      try {
        data = await planned.run();
      } catch (error) {
        const failure = failureOf(error);
        // A database failure mid-change may or may not have applied it: 'failed', not 'refused'.
        const outcome = failure.status >= 500 ? 'failed' : 'refused';
        await audit.finish(id, outcome, { asked: planned.detail, error: failure.error }).catch(() => undefined);
        count(action, outcome);
        return answer(failure.status, { error: failure.error });
      }
      // Made: an audit write failing now leaves the row 'started' (its end unrecorded), never a false refusal.
      await audit.finish(id, 'done', { asked: planned.detail, answered: data }).catch(() => undefined);
      count(action, 'done');
      return answer(200, { data });
    });

  read('/stats', 'stats.read', async (req) => {
    req.query([]);
    return deps.stats();
  });

  read('/overview', 'overview.read', async (req) => {
    req.query([]);
    return overview(db);
  });
  read('/series', 'series.read', async (req) => {
    const q = req.query(['window']);
    const window = oneOf(q, 'window', Object.keys(SERIES_WINDOWS) as (keyof typeof SERIES_WINDOWS)[]) ?? '1h';
    const samples = (await hasTable(db, 'oncely_stats_samples')) ? await readSeries(db, SERIES_WINDOWS[window]) : [];
    return { window, everyMs: SAMPLE_EVERY_MS, samples };
  });

  read('/records', 'records.list', async (req) => {
    const q = req.query(['state', 'action', 'tenant', 'olderThan', 'limit', 'cursor']);
    const filters = {
      state: oneOf(q, 'state', RECORD_STATES),
      action: q.get('action'),
      tenant: q.get('tenant'),
      olderThan: olderThanOf(q),
      limit: limitOf(q),
      cursor: cursorOf(q),
    };
    const page = await onRecords(() => once.list(filters));
    return { records: page.records.map((r) => ({ ref: recordRef(r), ...r })), cursor: page.cursor };
  });
  read('/records/:ref', 'records.show', async (req) => {
    req.query([]);
    const id = refOf(req.c.req.param('ref') ?? '');
    const record = await onRecords((tx) => once.get(id, { tx }));
    if (!record) refuse('NOT_FOUND', `no record ${recordRef(id)}`);
    return { ref: recordRef(id), ...record, result: await storedResult(db, id) };
  });
  change('/records/:ref/resolve', 'records.resolve', async (req, body) => {
    req.query([]);
    const id = refOf(req.c.req.param('ref') ?? '');
    const { resolution, note } = resolutionOf(body);
    return {
      target: recordRef(id),
      detail: { resolution, ...(note === undefined ? {} : { note }) },
      run: async () => {
        const by = settlerName(req.identity);
        const record = await onRecords((tx) =>
          once.resolve(id.action, id.key, storedResolution(id.action, resolution), { tenant: id.tenant, by, note, tx }),
        );
        return { ref: recordRef(id), ...record };
      },
    };
  });

  read('/events', 'events.list', async (req) => {
    const q = req.query(['status', 'source', 'limit', 'cursor']);
    const page = await listEvents(db, {
      status: oneOf(q, 'status', EVENT_STATUSES),
      source: nameOf(q, 'source'),
      limit: limitOf(q),
      cursor: cursorOf(q),
    });
    return { events: page.items, cursor: page.cursor };
  });
  read('/events/dead', 'events.dead', async (req) => {
    const q = req.query(['source', 'limit', 'cursor']);
    const page = await listDeadLetters(db, { source: nameOf(q, 'source'), limit: limitOf(q), cursor: cursorOf(q) });
    return { deadLetters: page.items, cursor: page.cursor };
  });
  change('/events/dead/replay', 'events.replay', async (req, body) => {
    req.query([]);
    const target = replayOf(body);
    return {
      target: target === 'all' ? 'all' : `${target.source}/${target.id}`,
      detail: target === 'all' ? { all: true } : target,
      run: async () => {
        const replayed = await events.replay(target === 'all' ? 'all' : [target]);
        if (replayed === 0 && target !== 'all') {
          const event = await events.get(target.source, target.id);
          if (!event) refuse('NOT_FOUND', `no event ${target.source}/${target.id}`);
          refuse('NOT_REPLAYABLE', `event ${target.source}/${target.id} is ${event?.status}, not dead-lettered`);
        }
        return { replayed };
      },
    };
  });

  read('/flows', 'flows.list', async (req) => {
    const q = req.query(['status', 'limit', 'cursor']);
    const page = await listFlowRuns(db, {
      status: oneOf(q, 'status', FLOW_STATUSES),
      limit: limitOf(q),
      cursor: cursorOf(q),
    });
    return { flows: page.items, cursor: page.cursor };
  });
  read('/flows/:id', 'flows.show', async (req) => {
    req.query([]);
    const workflowId = idOf(req.c.req.param('id') ?? '', 'the workflow id');
    const flow = flows ? await flows.show(workflowId) : null;
    if (!flow) refuse('NOT_FOUND', `no flow ${workflowId}${flows ? '' : ' (this app has no flows)'}`);
    return withTimeline(db, flow);
  });
  const flowChange = (verb: 'retry' | 'cancel') =>
    change(`/flows/:id/${verb}`, `flows.${verb}`, async (req, body) => {
      req.query([]);
      const workflowId = idOf(req.c.req.param('id') ?? '', 'the workflow id');
      onlyFields(body, []);
      return {
        target: workflowId,
        detail: {},
        run: async () => {
          const changed = flows ? await flows[verb](workflowId) : false;
          const flow = flows ? await flows.get(workflowId) : null;
          if (!flow) refuse('NOT_FOUND', `no flow ${workflowId}${flows ? '' : ' (this app has no flows)'}`);
          if (!changed)
            refuse(
              verb === 'retry' ? 'FLOW_NOT_RETRYABLE' : 'FLOW_NOT_CANCELLABLE',
              verb === 'retry'
                ? `flow ${workflowId} is ${flow?.status}: only a failed flow is retried`
                : `flow ${workflowId} is ${flow?.status}: only a pending or waiting flow is cancelled`,
            );
          return flow;
        },
      };
    });
  flowChange('retry');
  flowChange('cancel');

  read('/approvals', 'approvals.list', async (req) => {
    const q = req.query(['status', 'limit', 'cursor']);
    const page = await listApprovalRows(db, {
      status: oneOf(q, 'status', APPROVAL_STATUSES),
      limit: limitOf(q),
      cursor: cursorOf(q),
    });
    return { approvals: page.items, cursor: page.cursor };
  });
  const decide = (verb: 'approve' | 'reject') =>
    change(`/approvals/:id/${verb}`, `approvals.${verb}`, async (req, body) => {
      req.query([]);
      const id = idOf(req.c.req.param('id') ?? '', 'the approval id');
      onlyFields(body, verb === 'reject' ? ['reason'] : []);
      const reason = textField(body, 'reason') ?? null;
      return {
        target: id,
        detail: reason === null ? {} : { reason },
        run: async () => {
          if (!(await hasTable(db, 'oncely_approvals'))) refuse('APPROVAL_UNKNOWN', `no approval ${id}`);
          const to = verb === 'approve' ? 'approved' : 'rejected';
          const { approval, decided } = await decideApproval(db, id, to, settlerName(req.identity), reason);
          if (!approval) refuse('APPROVAL_UNKNOWN', `no approval ${id}`);
          if (decided === 'expired') refuse('APPROVAL_EXPIRED', `approval ${id} expired before it was decided`);
          if (decided === null)
            refuse('APPROVAL_DECIDED', `approval ${id} is ${approval?.status} already (by ${approval?.decidedBy})`);
          return getApproval(db, id);
        },
      };
    });
  decide('approve');
  decide('reject');

  read('/credits', 'credits.list', async (req) => {
    const q = req.query(['limit', 'cursor']);
    const page = await listCredits(db, { limit: limitOf(q), cursor: cursorOf(q) });
    return { accounts: page.items, cursor: page.cursor };
  });
  read('/credits/reservations', 'credits.reservations', async (req) => {
    const q = req.query(['account', 'limit', 'cursor']);
    const account = q.get('account');
    const page = await listReservations(db, {
      ...(account === undefined ? {} : { account: idOf(account, 'account') }),
      limit: limitOf(q),
      cursor: cursorOf(q),
    });
    return { reservations: page.items, cursor: page.cursor };
  });

  read('/duplicates', 'duplicates.list', async (req) => {
    const q = req.query(['table', 'limit', 'cursor']);
    const table = nameOf(q, 'table');
    const limit = limitOf(q);
    const cursor = cursorOf(q);
    if (!(await hasTable(db, 'oncely_duplicate_findings'))) return { findings: [], cursor: null };
    return listFindings(db, { limit, ...(table === undefined ? {} : { table }), ...(cursor ? { cursor } : {}) });
  });

  read('/audit', 'audit.list', async (req) => {
    const q = req.query(['limit', 'cursor']);
    const page = await audit.list(limitOf(q), cursorOf(q));
    return { actions: page.actions, cursor: page.cursor };
  });

  // Unknown admin paths answer after the access check: a caller without the token learns nothing of the routes.
  app.all('*', (c) => {
    const req = admit(c, 'unknown');
    if (req instanceof Response) return req;
    count('unknown', 'refused');
    return answer(404, {
      error: { code: 'NOT_FOUND', message: `no admin route ${c.req.method} ${c.req.path}` },
    });
  });
  return app;
}
