/**
 * Reconciliation: `unknown` and stalled records asked about, by their key, of the downstream that
 * did (or did not) have the effect, and settled with its answer. The engine owns the records and
 * the settling; this file owns the pass: what to list, whom to ask, what to count.
 */
import { type Duration, toMs } from '../core/duration.js';
import { InvalidArgumentError, OncelyError } from '../core/errors.js';
import type { Observer } from '../core/observer.js';
import { type PublicRecord, recordRef } from '../core/record.js';

/**
 * What the downstream says of one key: it had the effect (`{ value }`, the value the function
 * would have returned), it refused it for good (`{ error }`), it never saw it (`'retry'`: the key
 * is released and the next call executes), or it cannot tell yet (`'unknown'`: the record stays).
 */
export type ReconcileAnswer =
  | { value: unknown }
  | { error: { name?: string; message: string; code?: string } }
  | 'retry'
  | 'unknown';

/**
 * Asks the downstream about one record by `record.key`, the idempotency key the function gave it
 * (`ctx.idempotencyKey`).
 * @example const reconcile: Reconcile = async (r) => { const c = await gateway.find(r.key); return c ? { value: c } : 'retry'; };
 */
export type Reconcile = (record: PublicRecord) => Promise<ReconcileAnswer> | ReconcileAnswer;

/** An answer that settles a record. */
export type Settling = Exclude<ReconcileAnswer, 'unknown'>;

/** Options of `once.reconcile`. */
export interface ReconcileOptions {
  /** Only records last written at least this long ago: a slow holder may still finish. Default '1m'. */
  olderThan?: Duration;
  /** Most records asked about in one pass, 1 to 10,000. Default 100. */
  limit?: number;
  /** Kept on each record settled (`settlement.by`). Default 'reconciler'. */
  by?: string;
  /** Only this action's records. */
  action?: string;
  /** Only this tenant's records. */
  tenant?: string;
  /**
   * Runs each settling write in a transaction of yours, `tx` given to the store: for a store on a
   * connection others take turns on (the host's SQLite one). The downstream is asked outside it.
   */
  transaction?: <T>(work: (tx: unknown) => Promise<T>) => Promise<T>;
}

/** What one pass did. */
export interface ReconcileReport {
  /** Records settled, as `tenant/action/key`, with the answer applied. */
  settled: { ref: string; answer: 'value' | 'error' | 'retry' }[];
  /** Records whose reconcile answered 'unknown': left as they are. */
  unknown: number;
  /** Records whose reconcile threw, timed out or answered something else: left as they are. */
  failed: number;
  /** Records that changed between the listing and the settling (a holder finished, a person settled): left to that. */
  skipped: number;
  /** Records whose action has no reconcile function, waiting for a person. */
  awaiting: { action: string; state: 'unknown' | 'in_progress'; count: number }[];
}

/** A reconcile function as registered for an action, with the TTL of what it settles. */
export interface Registered {
  reconcile: Reconcile;
  ttlMs: number | null;
}

/** What a pass needs of the engine. */
export interface ReconcileDeps {
  reconcilers: ReadonlyMap<string, Registered>;
  observer: Observer;
  /** The engine's clock. */
  now(): number;
  /** One page of records (the engine's `list`). */
  list(query: {
    state: 'unknown' | 'in_progress';
    action?: string;
    tenant?: string;
    olderThan: number;
    limit: number;
    cursor?: string;
  }): Promise<{ records: PublicRecord[]; cursor: string | null }>;
  /** Settles `record` as listed; NOT_RESOLVABLE when it changed meanwhile. */
  settle(record: PublicRecord, answer: Settling, by: string): Promise<unknown>;
}

const STATES = ['unknown', 'in_progress'] as const;
const LIMIT_MAX = 10_000;
const PAGE_MAX = 1_000;
// Counting the records left for a person reads at most this many a pass; the gauge says "at least" past it.
const AWAITING_SCAN_MAX = 10_000;
// A downstream that never answers must not hold the pass (and `oncely serve`'s stop) forever.
const ASK_TIMEOUT_MS = 30_000;
const SETTLER_MAX = 200;

/** Refuses a settler name that is not 1 to 200 characters of text (INVALID_ARGUMENT). */
export function checkSettler(by: unknown): string {
  if (typeof by !== 'string' || by.trim() === '' || by.length > SETTLER_MAX)
    throw new InvalidArgumentError(`by must name who settles the record, 1 to ${SETTLER_MAX} characters`);
  return by;
}

/**
 * One pass: each action with a reconcile function has its `unknown` and stalled `in_progress`
 * records listed on their own (records waiting for a person never crowd them out of `limit`),
 * asked about one at a time and settled; then the records of actions without one are counted
 * into the report and the `oncely_records_awaiting` gauge.
 */
export async function reconcilePass(deps: ReconcileDeps, options: ReconcileOptions = {}): Promise<ReconcileReport> {
  const { olderThan = '1m', limit = 100, action, tenant } = options;
  const olderThanMs = toMs(olderThan, 'olderThan');
  if (!Number.isInteger(limit) || limit < 1 || limit > LIMIT_MAX)
    throw new InvalidArgumentError(`limit must be a whole number from 1 to ${LIMIT_MAX}`);
  const by = checkSettler(options.by ?? 'reconciler');
  const report: ReconcileReport = { settled: [], unknown: 0, failed: 0, skipped: 0, awaiting: [] };
  const filters = { tenant, olderThan: olderThanMs };
  let left = limit;
  for (const [name, registered] of deps.reconcilers) {
    if (action !== undefined && name !== action) continue;
    for (const state of STATES)
      for await (const record of stalled(deps, { ...filters, state, action: name }, () => left)) {
        left--;
        await ask(deps, registered.reconcile, record, by, report);
      }
  }
  await countAwaiting(deps, { ...filters, action }, report);
  return report;
}

/** The records of one listing that nobody holds, page by page, while `room()` is above 0. */
async function* stalled(
  deps: ReconcileDeps,
  query: { state: 'unknown' | 'in_progress'; action?: string; tenant?: string; olderThan: number },
  room: () => number,
): AsyncGenerator<PublicRecord> {
  let cursor: string | undefined;
  while (room() > 0) {
    const page = await deps.list({ ...query, limit: Math.min(room(), PAGE_MAX), ...(cursor ? { cursor } : {}) });
    for (const record of page.records) {
      if (room() <= 0) return;
      // A live lease is a holder at work (renewing keeps it live), whatever its age.
      if (record.state === 'in_progress' && (record.leaseUntil ?? 0) > deps.now()) continue;
      yield record;
    }
    if (page.cursor === null) return;
    cursor = page.cursor;
  }
}

async function ask(
  deps: ReconcileDeps,
  reconcile: Reconcile,
  record: PublicRecord,
  by: string,
  report: ReconcileReport,
): Promise<void> {
  const { metrics } = deps.observer;
  let answer: unknown;
  try {
    answer = await withTimeout(Promise.resolve().then(() => reconcile(record)));
  } catch (error) {
    return failed(deps, record, report, error);
  }
  if (answer === 'unknown') {
    report.unknown++;
    metrics.add('oncely_reconciled_total', [record.action, 'unknown', 'reconciler']);
    return;
  }
  const settling = asSettling(answer);
  if (!settling)
    return failed(
      deps,
      record,
      report,
      new Error("reconcile must answer { value }, { error: { message } }, 'retry' or 'unknown'"),
    );
  try {
    await deps.settle(record, settling, by);
  } catch (error) {
    if (OncelyError.is(error) && (error.code === 'NOT_RESOLVABLE' || error.code === 'NOT_FOUND')) {
      report.skipped++;
      return;
    }
    // The store failing ends the pass (the next one tries again); anything else is this answer's fault.
    if (OncelyError.is(error) && (error.code === 'STORE_UNAVAILABLE' || error.code === 'CLOSED')) throw error;
    return failed(deps, record, report, error);
  }
  const kind = settling === 'retry' ? 'retry' : 'value' in settling ? 'value' : 'error';
  report.settled.push({ ref: recordRef(record), answer: kind });
  if (deps.observer.listening)
    deps.observer.decide({
      decision: 'reconciled',
      surface: 'engine',
      action: record.action,
      key: record.key,
      tenant: record.tenant,
      traceId: record.traceId,
      fence: record.fence,
      attempt: record.attempts,
      detail: { answer: kind, by },
    });
}

/** A reconcile that threw or answered garbage: counted, reported to the logger and hook; the record stays. */
function failed(deps: ReconcileDeps, record: PublicRecord, report: ReconcileReport, error: unknown): void {
  report.failed++;
  deps.observer.metrics.add('oncely_reconciled_total', [record.action, 'failed', 'reconciler']);
  if (!deps.observer.listening) return;
  const e = error as { code?: unknown; message?: unknown };
  const message = typeof e?.message === 'string' ? e.message : String(error);
  deps.observer.decide({
    decision: 'reconcile_failed',
    surface: 'engine',
    action: record.action,
    key: record.key,
    tenant: record.tenant,
    traceId: record.traceId,
    fence: record.fence,
    attempt: record.attempts,
    error: typeof e?.code === 'string' ? { code: e.code, message } : { message },
  });
}

/** The answer as a resolution, or null when it is none of the four shapes. */
function asSettling(answer: unknown): Settling | null {
  if (answer === 'retry') return 'retry';
  if (typeof answer !== 'object' || answer === null) return null;
  if (Object.hasOwn(answer, 'value') && !Object.hasOwn(answer, 'error')) return answer as { value: unknown };
  const error = (answer as { error?: unknown }).error;
  if (!Object.hasOwn(answer, 'value') && typeof error === 'object' && error !== null) {
    const { message, code, name } = error as Record<string, unknown>;
    const text = (v: unknown) => v === undefined || typeof v === 'string';
    if (typeof message === 'string' && text(code) && text(name)) return answer as Settling;
  }
  return null;
}

/**
 * Counts, by action and state, the records of actions without a reconcile function (in `scope`),
 * into the report and the gauge. A pass over one tenant leaves the gauge alone: it counts every tenant.
 */
async function countAwaiting(
  deps: ReconcileDeps,
  scope: { action?: string; tenant?: string; olderThan: number },
  report: ReconcileReport,
): Promise<void> {
  const counts = new Map<string, { action: string; state: 'unknown' | 'in_progress'; count: number }>();
  let room = AWAITING_SCAN_MAX;
  for (const state of STATES) {
    if (scope.action !== undefined && deps.reconcilers.has(scope.action)) break;
    for await (const record of stalled(deps, { ...scope, state }, () => room)) {
      room--;
      if (deps.reconcilers.has(record.action)) continue;
      const id = `${record.action}\u0001${state}`;
      const seen = counts.get(id);
      if (seen) seen.count++;
      else counts.set(id, { action: record.action, state, count: 1 });
    }
  }
  report.awaiting = [...counts.values()];
  if (scope.tenant !== undefined) return;
  const { metrics } = deps.observer;
  // Series this pass saw none of fall to 0: a gauge is what is waiting now, not what ever waited.
  for (const series of metrics.read('oncely_records_awaiting')) {
    const [seriesAction, state] = series.labels as [string, string];
    if (scope.action === undefined || seriesAction === scope.action)
      if (!counts.has(`${seriesAction}\u0001${state}`)) metrics.set('oncely_records_awaiting', series.labels, 0);
  }
  for (const { action, state, count } of counts.values())
    metrics.set('oncely_records_awaiting', [action, state], count);
}

function withTimeout<T>(work: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`reconcile did not answer within ${ASK_TIMEOUT_MS / 1000} s`)),
      ASK_TIMEOUT_MS,
    );
    timer.unref();
  });
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}
