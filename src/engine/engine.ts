import { randomUUID } from 'node:crypto';
import { sleep } from '../core/backoff.js';
import { type Clock, systemClock } from '../core/clock.js';
import {
  InProgressError,
  InvalidArgumentError,
  KeyReusedError,
  LeaseLostError,
  OncelyError,
  OutcomeNotStoredError,
  OutcomeUnknownError,
  StoreUnavailableError,
} from '../core/errors.js';
import { fingerprint } from '../core/fingerprint.js';
import { type KeyPart, keyFrom, validateId, validateKey, validateName } from '../core/key.js';
import type { CallOutcome, Surface } from '../core/metrics.js';
import { type DecisionEvent, type ObserveOptions, Observer } from '../core/observer.js';
import {
  absoluteTimes as absolute,
  decide,
  type PublicRecord,
  publicRecord,
  type RecordId,
  type StoredRecord,
} from '../core/record.js';
import { endSpan, type Span, startSpan, tracingReady, withSpan } from '../core/tracing.js';
import type { Expectation, RecordPatch, RecordStore, WriteOptions } from '../store.js';
import { ReplayCache } from './cache.js';
import { ExecutionContext, type RunContext } from './context.js';
import { CallCounts, type CountedCall, RAN } from './counts.js';
import type { CrashWindow, TestHooks } from './hooks.js';
import { type ClaimIn, LeaseKeeper } from './lease.js';
import { type ActionOptions, type ResolvedOptions, resolveOptions, storesError } from './options.js';
import { checkResultSize, decodeError, decodeValue, encodeError, encodeValue } from './outcome.js';
import {
  checkSettler,
  type Reconcile,
  type ReconcileOptions,
  type ReconcileReport,
  type Registered,
  reconcilePass,
} from './reconcile.js';
import {
  checkNote,
  type ListOptions,
  listQuery,
  type RecordList,
  type Resolution,
  type ResolveOptions,
  settlementPatch,
} from './records.js';

/** Options of `createOncely`. */
export interface OncelyOptions extends ObserveOptions {
  /** Where records live: `sqliteStore()`, `postgresStore()`, `redisStore()`. */
  store: RecordStore;
  /** Tenant used when a call names none. Default 'default'. */
  tenant?: string;
  /** Options applied to every action unless `wrap` or `run` override them. */
  defaults?: ActionOptions;
  /**
   * Keep this many finished records in this process and answer their duplicates from memory,
   * without a store read. Off by default: a record deleted from the store by hand would still
   * be replayed here until it expires. Calls inside a caller's transaction never use it.
   */
  replayCache?: number;
  /** Reconcile functions by action, for `once.reconcile` (see also the `reconcile` option of `wrap` and `run`). */
  reconcile?: Record<string, Reconcile>;
  /**
   * Where the engine reads the time (a test's manual clock). Leases and TTLs are judged by the
   * store's clock: give the same one to `sqliteStore({ clock })`. Default the system clock.
   */
  clock?: Clock;
  /** Test only (oncely/testing's crash windows): called at each window of each execution. */
  hooks?: TestHooks;
}

/** One business intent to run once. */
export interface RunRequest<I = unknown> extends ActionOptions {
  /** What the key does, e.g. 'charge'. A key is unique within (tenant, action). */
  action: string;
  /** The business key, e.g. keyFrom('ORD-10086', 'charge'). */
  key: string;
  /** The input; its canonical SHA-256 must match on every duplicate. */
  input?: I;
  /** Overrides the instance tenant for this call (the authenticated principal, account or API key). */
  tenant?: string;
  /** A caller's open transaction to join (SQLite and PostgreSQL stores). */
  tx?: unknown;
  /**
   * Claim first (effects outside the database): the claim, renewals, takeover, unknown mark, release
   * or stored failure each in a transaction `claimIn` opens and commits, so a crash leaves the claim
   * to `onLeaseExpired`; the outcome joins the transaction `fn` names with `ctx.completeIn(tx)`. Not with `tx`.
   */
  claimIn?: ClaimIn;
  /** The intent's trace id, made at the entry and the same across retries; the first claim keeps it. Default a new UUID. */
  traceId?: string;
  /** This physical attempt's id (an HTTP request id); default a new UUID. */
  requestId?: string;
  /** What is calling, for metrics and decisions: the surfaces built on the engine set it. Default 'engine'. */
  surface?: Surface;
  /** Asks the downstream about this action's unknown or stalled records; registered for the action on this instance. */
  reconcile?: Reconcile;
}

/** What `run` returns: the value, whether it was replayed, and the record. */
export interface RunResult<T> {
  value: T;
  replayed: boolean;
  record: PublicRecord;
}

/** Options of `wrap`: the action, how to build the key from the input, and per-action policies. */
export interface WrapOptions<I> extends ActionOptions {
  action: string;
  /** Builds the key from the input: a string, or parts joined by `keyFrom`. */
  key: (input: I) => string | KeyPart[];
  /** The tenant of a call, fixed or from the input. */
  tenant?: string | ((input: I) => string);
  /** Asks the downstream about this action's unknown or stalled records (`once.reconcile`). */
  reconcile?: Reconcile;
}

export type { ClaimIn } from './lease.js';
export type { ListOptions, RecordList, Resolution, ResolveOptions } from './records.js';

const WAIT_POLL_MIN_MS = 10;
const WAIT_POLL_MAX_MS = 250;
const PURGE_BATCH = 500;
const NO_OPTIONS: ActionOptions = {};
// Every write of the engine gives its times as durations from the store's clock (see WriteOptions),
// so processes whose clocks disagree still agree on whose lease is live.
const RELATIVE: WriteOptions = { relative: true };
// A failed completion is retried after these pauses, doubling, until completionRetry runs out.
const COMPLETION_RETRY_FIRST_MS = 20;
const COMPLETION_RETRY_MAX_MS = 250;

/**
 * Whether two calls pass the same per-call options. Each option by name: named reads stay fast
 * where a loop over names (a keyed read on each call's own object) does not, and this runs on
 * every call. `optionsGiven` lists the same options, checked complete by its type.
 */
function sameOptions(a: ActionOptions, b: ActionOptions): boolean {
  return (
    a.ttl === b.ttl &&
    a.lease === b.lease &&
    a.wait === b.wait &&
    a.onError === b.onError &&
    a.onLeaseExpired === b.onLeaseExpired &&
    a.maxResultBytes === b.maxResultBytes &&
    a.completionRetry === b.completionRetry
  );
}

/** The per-call options of a request, every one named (the type fails to compile when one is missing). */
function optionsGiven(request: ActionOptions): ActionOptions {
  const given: { [K in keyof Required<ActionOptions>]: ActionOptions[K] } = {
    ttl: request.ttl,
    lease: request.lease,
    wait: request.wait,
    onError: request.onError,
    onLeaseExpired: request.onLeaseExpired,
    maxResultBytes: request.maxResultBytes,
    completionRetry: request.completionRetry,
  };
  return given;
}

/**
 * The idempotency engine: claim a key, execute once, store the outcome, replay it to duplicates.
 * @example
 * const once = await createOncely({ store: sqliteStore(), tenant: 'acme' });
 * const r = await once.run({ action: 'charge', key: keyFrom('ORD-10086', 'charge'), input }, (ctx) => charge(input, ctx.idempotencyKey));
 */
export class Oncely {
  private readonly store: RecordStore;
  private readonly tenant: string;
  private readonly defaults: ActionOptions | undefined;
  private readonly resolvedDefaults: ResolvedOptions;
  private lastOptions: { given: ActionOptions; resolved: ResolvedOptions } | undefined;
  // The last action name that passed validation: most calls repeat the one before.
  private lastAction: string | undefined;
  private readonly cache: ReplayCache | undefined;
  private readonly observer: Observer;
  private readonly counts: CallCounts;
  private readonly reconcilers = new Map<string, Registered>();
  private readonly clock: Clock;
  private readonly hooks: TestHooks | undefined;
  private closed = false;

  constructor(options: OncelyOptions) {
    if (!options?.store) throw new InvalidArgumentError('createOncely needs a store, e.g. sqliteStore()');
    this.store = options.store;
    this.tenant = validateName(options.tenant ?? 'default', 'tenant');
    this.defaults = options.defaults;
    this.resolvedDefaults = resolveOptions(options.defaults);
    const { replayCache } = options;
    if (replayCache !== undefined && (!Number.isInteger(replayCache) || replayCache < 0))
      throw new InvalidArgumentError('replayCache must be a whole number of records (0 for none)');
    this.cache = replayCache ? new ReplayCache(replayCache) : undefined;
    this.observer = new Observer(options);
    this.counts = new CallCounts(this.observer.metrics);
    this.clock = options.clock ?? systemClock;
    this.hooks = options.hooks;
    for (const [action, reconcile] of Object.entries(options.reconcile ?? {}))
      this.registerReconcile(action, reconcile);
  }

  /** Runs `fn` once for (tenant, action, key); duplicates get the stored outcome with `replayed: true`. */
  run<T, I = unknown>(request: RunRequest<I>, fn: (ctx: RunContext) => Promise<T> | T): Promise<RunResult<T>> {
    const options = this.optionsOf(request);
    // Registered when it differs from the one registered: a call passing the same function costs one lookup.
    if (request.reconcile !== undefined && this.reconcilers.get(request.action)?.reconcile !== request.reconcile)
      this.register(request.action, request.reconcile, options.ttlMs);
    return this.runResolved(request, options, fn);
  }

  /**
   * Registers the function `once.reconcile` asks about `action`'s unknown or stalled records,
   * replacing any before; what it settles expires after `ttl` (default the instance's).
   * @example once.registerReconcile('charge', async (r) => ((await gateway.find(r.key)) ? { value: ... } : 'retry'));
   */
  registerReconcile(action: string, reconcile: Reconcile, ttl?: ActionOptions['ttl']): void {
    this.register(action, reconcile, resolveOptions(this.defaults, ttl === undefined ? {} : { ttl }).ttlMs);
  }

  private register(action: string, reconcile: Reconcile, ttlMs: number | null): void {
    const name = validateName(action, 'action');
    if (typeof reconcile !== 'function')
      throw new InvalidArgumentError(`reconcile of action ${name} must be a function of the record`);
    this.reconcilers.set(name, { reconcile, ttlMs });
  }

  /**
   * One reconciliation pass: `unknown` records and stalled `in_progress` ones (lease over) last
   * written over `olderThan` ago are asked about with their action's reconcile function and
   * settled with its answer (`settlement.by` is `by`); those of actions with none are counted as
   * awaiting a person (the report's `awaiting`, the `oncely_records_awaiting` gauge).
   * @example const { settled, awaiting } = await once.reconcile({ olderThan: '5m' });
   */
  async reconcile(options: ReconcileOptions = {}): Promise<ReconcileReport> {
    this.assertOpen();
    return reconcilePass(
      {
        reconcilers: this.reconcilers,
        observer: this.observer,
        list: (query) => this.list(query),
        now: () => this.clock.now(),
        settle: (record, answer, by) => {
          const ttlMs = this.reconcilers.get(record.action)?.ttlMs ?? this.resolvedDefaults.ttlMs;
          const settle = (tx?: unknown) => this.settleRecord(record, answer, { by }, ttlMs, 'reconciler', tx);
          return options.transaction ? options.transaction(settle) : settle();
        },
      },
      options,
    );
  }

  /**
   * The options of one call. Callers that pass options mostly pass the same ones every time (the
   * HTTP middleware does), so the last resolved set is kept with the values it came from.
   */
  private optionsOf(request: ActionOptions): ResolvedOptions {
    if (sameOptions(request, NO_OPTIONS)) return this.resolvedDefaults;
    const last = this.lastOptions;
    if (last && sameOptions(request, last.given)) return last.resolved;
    const resolved = resolveOptions(this.defaults, request);
    this.lastOptions = { given: optionsGiven(request), resolved };
    return resolved;
  }

  /**
   * Turns a function into its once-only form; the key comes from each input.
   * @example const charge = once.wrap({ action: 'charge', key: (i) => [i.orderId, 'charge'] }, (i, ctx) => gateway.charge(i, ctx.idempotencyKey));
   */
  wrap<I, T>(
    options: WrapOptions<I>,
    fn: (input: I, ctx: RunContext) => Promise<T> | T,
  ): (
    input: I,
    call?: { tenant?: string; tx?: unknown; traceId?: string; requestId?: string },
  ) => Promise<RunResult<T>> {
    const resolved = resolveOptions(this.defaults, options);
    const action = validateName(options.action, 'action');
    if (options.reconcile !== undefined) this.register(action, options.reconcile, resolved.ttlMs);
    return (input, call) => {
      const built = options.key(input);
      const key = Array.isArray(built) ? keyFrom(...built) : built;
      const tenant = call?.tenant ?? (typeof options.tenant === 'function' ? options.tenant(input) : options.tenant);
      const request: RunRequest = { action, key, input, tenant, tx: call?.tx };
      if (call?.traceId !== undefined) request.traceId = call.traceId;
      if (call?.requestId !== undefined) request.requestId = call.requestId;
      return this.runResolved(request, resolved, (ctx) => fn(input, ctx));
    };
  }

  /**
   * Reads one record, or null: by action and key in this (or the given) tenant, or by its full id.
   * @example await once.get('charge', 'ORD-1:charge'); await once.get({ tenant: 'acme', action: 'charge', key: 'ORD-1:charge' });
   */
  async get(id: RecordId, options?: { tx?: unknown }): Promise<PublicRecord | null>;
  async get(action: string, key: string, options?: { tenant?: string; tx?: unknown }): Promise<PublicRecord | null>;
  async get(
    first: string | RecordId,
    second?: string | { tx?: unknown },
    third: { tenant?: string; tx?: unknown } = {},
  ): Promise<PublicRecord | null> {
    this.assertOpen();
    const [id, tx] =
      typeof first === 'string'
        ? [this.recordId(first, second as string, third.tenant), third.tx]
        : [this.recordId(first?.action, first?.key, first?.tenant), (second as { tx?: unknown } | undefined)?.tx];
    const record = await this.call(() => this.store.get(id, tx));
    return record && publicRecord(record);
  }

  /**
   * One page of records matching the filters, across tenants unless one is named: what an
   * operator looks for (`{ state: 'unknown' }`, stalled claims as `{ state: 'in_progress', olderThan: '5m' }`).
   * @example for (let page = await once.list({ state: 'unknown' }); ; page = await once.list({ state: 'unknown', cursor: page.cursor })) { ...; if (!page.cursor) break; }
   */
  async list(options: ListOptions = {}): Promise<RecordList> {
    this.assertOpen();
    const query = listQuery(options, this.clock.now());
    const page = await this.call(() => this.store.list(query));
    return { records: page.records.map((record) => publicRecord(record)), cursor: page.cursor };
  }

  /**
   * Settles a record whose outcome is unknown (or whose lease ran out): store a value, store an
   * error, or release the key ('retry') so the next caller executes again.
   */
  async resolve(
    action: string,
    key: string,
    resolution: Resolution,
    options: ResolveOptions = {},
  ): Promise<PublicRecord> {
    this.assertOpen();
    const id = this.recordId(action, key, options.tenant);
    checkSettler(options.by ?? 'person');
    checkNote(options.note);
    const { ttlMs } = resolveOptions(this.defaults, { ttl: options.ttl });
    const record = await this.call(() => this.store.get(id, options.tx));
    if (!record) throw new OncelyError('NOT_FOUND', `no record for key "${key}" of action "${action}"`);
    return this.settleRecord(record, resolution, options, ttlMs, 'person', options.tx);
  }

  /**
   * Writes a settlement onto `record` as it was read or listed, counted under `settler`: refused
   * (NOT_RESOLVABLE) when it is neither unknown nor stalled, or when it changed since.
   */
  private async settleRecord(
    record: PublicRecord,
    resolution: Resolution,
    options: { by?: string; note?: string },
    expiresAt: number | null,
    settler: 'person' | 'reconciler',
    tx?: unknown,
  ): Promise<PublicRecord> {
    const { patch, answer } = settlementPatch(record, resolution, options, expiresAt, this.clock.now());
    // The exact lease guards against a holder that renewed since it was read (a stalled look by this clock).
    const expect = { fence: record.fence, states: [record.state], leaseUntil: record.leaseUntil };
    const applied = await this.call(() => this.store.update(record, expect, patch, tx, RELATIVE));
    if (applied === null)
      throw new OncelyError('NOT_RESOLVABLE', 'the record changed while resolving it; read it again');
    this.observer.metrics.add('oncely_reconciled_total', [record.action, answer, settler]);
    return publicRecord(record as StoredRecord, absolute(patch, applied));
  }

  /** Deletes expired records in batches of `batchSize`; returns how many were deleted. */
  async purgeExpired(options: { batchSize?: number } = {}): Promise<number> {
    this.assertOpen();
    const batchSize = options.batchSize ?? PURGE_BATCH;
    if (!Number.isInteger(batchSize) || batchSize <= 0)
      throw new InvalidArgumentError('batchSize must be a positive integer');
    const now = this.clock.now();
    let total = 0;
    for (;;) {
      const deleted = await this.call(() => this.store.purgeExpired(now, batchSize));
      total += deleted;
      if (deleted < batchSize) return total;
    }
  }

  /** Closes the store's own connections; later calls fail with CLOSED. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.store.close();
  }

  /** Runs one call and observes it: one outcome counted, one decision, one span. */
  private async runResolved<T>(
    request: RunRequest,
    options: ResolvedOptions,
    fn: (ctx: RunContext) => Promise<T> | T,
  ): Promise<RunResult<T>> {
    this.assertOpen();
    // A bad key, name or input is refused before anything is counted: it is not a call of the action.
    const id = this.recordId(request.action, request.key, request.tenant);
    const print = fingerprint(request.input);
    if (request.traceId !== undefined) validateId(request.traceId, 'traceId');
    if (request.requestId !== undefined) validateId(request.requestId, 'requestId');
    if (request.claimIn !== undefined && (typeof request.claimIn !== 'function' || request.tx !== undefined))
      throw new InvalidArgumentError(
        'claimIn must be a function of a write, and excludes tx (the claim is committed first)',
      );
    const observer = this.observer;
    const track = new Track(request, id.tenant);
    const tracer = observer.activeTracer;
    if (tracer)
      track.span = startSpan(tracer, 'oncely.run', {
        'oncely.action': request.action,
        'oncely.surface': track.surface,
      });
    const timed = observer.metrics.enabled || observer.listening || track.span !== undefined;
    const started = timed ? performance.now() : 0;
    try {
      const result = await this.claimAndRun(id, print, request, options, fn, track);
      if (timed) this.settle(track, performance.now() - started, undefined);
      return result;
    } catch (error) {
      if (timed) this.settle(track, performance.now() - started, error);
      throw error;
    }
  }

  /** Counts the call's one outcome, reports its decision, ends its span. */
  private settle(track: Track, ms: number, error: unknown): void {
    const { surface, action } = track;
    const outcome = track.outcome;
    this.counts.count(track, ms / 1000);
    const record = track.record;
    if (this.observer.listening) {
      // One literal of one shape every time (no spread): built on every call a hook listens to.
      const event: DecisionEvent = {
        decision: outcome,
        surface,
        action,
        key: track.key,
        tenant: track.tenant,
        traceId: record?.traceId,
        requestId: track.requestId(),
        fence: record?.fence,
        attempt: record?.attempts,
        durationMs: ms,
      };
      if (error !== undefined && outcome !== 'replayed') event.error = errorFields(error);
      this.observer.decide(event);
    }
    if (track.span) {
      if (outcome === 'replayed') track.span.updateName('oncely.replay');
      else if (RAN.has(outcome)) track.span.updateName('oncely.execute');
      endSpan(
        track.span,
        {
          'oncely.outcome': outcome,
          'oncely.replayed': outcome === 'replayed',
          ...(record
            ? { 'oncely.attempt': record.attempts, 'oncely.fence': record.fence, 'oncely.trace_id': record.traceId }
            : {}),
        },
        RAN.has(outcome) && outcome !== 'executed' ? error : undefined,
      );
    }
  }

  /** Reports a takeover as its own decision (the call then executes, and counts as that). */
  private tookOver(track: Track, record: StoredRecord): void {
    track.takenOver = true;
    if (!this.observer.listening) return;
    this.observer.decide({
      decision: 'taken_over',
      surface: track.surface,
      action: track.action,
      key: track.key,
      tenant: track.tenant,
      traceId: record.traceId,
      requestId: track.requestId(),
      fence: record.fence + 1,
      attempt: record.attempts + 1,
    });
  }

  private async claimAndRun<T>(
    id: RecordId,
    print: string,
    request: RunRequest,
    options: ResolvedOptions,
    fn: (ctx: RunContext) => Promise<T> | T,
    track: Track,
  ): Promise<RunResult<T>> {
    const { tx, claimIn } = request;
    // Inside a caller's transaction a record may yet roll back: it is neither cached nor answered
    // from the cache; nor under claimIn, whose outcome commits with the function's transaction.
    const cache = tx === undefined && claimIn === undefined ? this.cache : undefined;
    const hit = cache?.get(id, this.clock.now());
    if (hit) {
      track.found = true;
      track.record = hit.record;
      if (hit.record.fingerprint !== print) {
        track.outcome = 'key_reused';
        throw new KeyReusedError({ ...hit.record });
      }
      track.outcome = 'replayed';
      return this.replay({ ...hit.record }, hit.result);
    }
    const deadline = options.waitMs > 0 ? Date.now() + options.waitMs : 0;
    let poll = WAIT_POLL_MIN_MS;
    for (;;) {
      const sent = Date.now();
      // Fields written out: on Node 20 a spread followed by literal members is ~100x slower. Times
      // are durations from the store's clock (RELATIVE): the lease, the TTL, and 0 for now.
      const fresh: StoredRecord = {
        tenant: id.tenant,
        action: id.action,
        key: id.key,
        state: 'in_progress',
        fingerprint: print,
        fence: 1,
        attempts: 1,
        leaseUntil: options.leaseMs,
        result: null,
        traceId: request.traceId ?? randomUUID(),
        createdAt: 0,
        updatedAt: 0,
        completedAt: null,
        // Under 'hold' a vanished claim must survive until someone decides, so it never expires.
        expiresAt: options.onLeaseExpired === 'hold' ? null : options.ttlMs,
      };
      const insert = (t: unknown) => this.store.insertOrGet(fresh, t, RELATIVE);
      const found = await this.call(() => (claimIn ? claimIn(insert) : insert(tx)));
      if (found.inserted) return this.execute(found.record, options, tx, fn, sent, track);
      const record = found.record;
      track.record = record;
      // Leases and expiries are judged by the store's clock, never this process's.
      const now = found.now;
      const decision = decide(record, print, options.onLeaseExpired, now);
      track.found = decision.kind !== 'start_fresh';
      switch (decision.kind) {
        case 'replay': {
          const pub = publicRecord(record);
          cache?.set(pub, record.result);
          track.outcome = 'replayed';
          return this.replay(pub, record.result);
        }
        case 'key_reused':
          track.outcome = 'key_reused';
          throw new KeyReusedError(publicRecord(record));
        case 'unknown':
          track.outcome = 'unknown';
          throw new OutcomeUnknownError(publicRecord(record));
        case 'mark_unknown': {
          const patch: RecordPatch = { state: 'unknown', leaseUntil: null, expiresAt: null, updatedAt: 0 };
          const applied = await this.call(() =>
            this.write(track, tx, (t) => this.store.update(id, seenAs(record), patch, t, RELATIVE)),
          );
          if (applied !== null) {
            track.outcome = 'unknown';
            throw new OutcomeUnknownError(publicRecord(record, absolute(patch, applied)));
          }
          continue;
        }
        case 'take_over':
        case 'start_fresh': {
          // A takeover keeps the intent's trace, creation and attempt count; an expired key starts a new life.
          const kept = decision.kind === 'take_over';
          const patch: RecordPatch = {
            state: 'in_progress',
            fingerprint: print,
            fence: record.fence + 1,
            attempts: kept ? record.attempts + 1 : 1,
            leaseUntil: options.leaseMs,
            result: null,
            traceId: kept ? record.traceId : fresh.traceId,
            updatedAt: 0,
            completedAt: null,
            expiresAt: fresh.expiresAt,
          };
          // An expired key is a new intent: the settlement of the old one is not its own.
          if (!kept) {
            patch.createdAt = 0;
            if (record.settlement) patch.settlement = null;
          }
          const applied = await this.call(() =>
            this.write(track, tx, (t) => this.store.update(id, seenAs(record), patch, t, RELATIVE)),
          );
          if (applied !== null) {
            // The claim as stored: its times count from the store's clock when the write applied.
            const claimed: StoredRecord = {
              tenant: id.tenant,
              action: id.action,
              key: id.key,
              state: 'in_progress',
              fingerprint: print,
              fence: record.fence + 1,
              attempts: patch.attempts as number,
              leaseUntil: applied + options.leaseMs,
              result: null,
              traceId: patch.traceId as string,
              createdAt: kept ? record.createdAt : applied,
              updatedAt: applied,
              completedAt: null,
              expiresAt: fresh.expiresAt === null ? null : applied + fresh.expiresAt,
            };
            if (kept && record.settlement) claimed.settlement = record.settlement;
            // A lease that ran out is a holder that may have had its effect: this execution may be a second.
            if (kept && record.state === 'in_progress') this.tookOver(track, record);
            return this.execute(claimed, options, tx, fn, sent, track);
          }
          continue;
        }
        case 'in_progress': {
          const left = deadline - Date.now();
          if (left <= 0) {
            track.outcome = 'in_progress';
            throw new InProgressError(publicRecord(record), decision.retryAfterMs);
          }
          await sleep(Math.min(poll, left, decision.retryAfterMs));
          poll = Math.min(poll * 2, WAIT_POLL_MAX_MS);
          continue;
        }
      }
    }
  }

  private async execute<T>(
    record: StoredRecord,
    options: ResolvedOptions,
    tx: unknown,
    fn: (ctx: RunContext) => Promise<T> | T,
    claimedAt: number,
    track: Track,
  ): Promise<RunResult<T>> {
    const { claimIn } = track;
    if (this.hooks) await this.at('claimed', record);
    // Inside a caller's transaction nobody else can see the claim, so there is nothing to renew.
    const keeper =
      tx === undefined ? new LeaseKeeper(this.store, record, options.leaseMs, claimedAt, claimIn) : undefined;
    const ctx = new ExecutionContext(record, keeper, track.knownRequestId(), claimIn !== undefined);
    track.record = record;
    track.ctx = ctx;
    let value: T;
    try {
      if (this.hooks) await this.at('before-effect', record);
      value = await (track.span ? withSpan(track.span, () => fn(ctx)) : fn(ctx));
    } catch (error) {
      keeper?.stop();
      // Claim first: written in the transaction fn named, else (fn's rolled back) in one of claimIn's own.
      if (claimIn) tx = ctx.completion;
      if (storesError(options.onError, error)) return this.storeFailure(record, error, options, tx, keeper, track);
      track.outcome = 'released';
      const patch: RecordPatch = { state: 'released', leaseUntil: null, updatedAt: 0, expiresAt: options.ttlMs };
      const release = (t: unknown) =>
        this.store.update(record, { fence: record.fence, states: ['in_progress'] }, patch, t, RELATIVE);
      // If the release cannot be written, the lease runs out and the policy decides; the caller's error matters more.
      await this.write(track, tx, release).catch(() => null);
      throw error;
    }
    keeper?.stop();
    if (this.hooks) await this.at('after-effect', record);
    // Claim first: the outcome commits with fn's own writes, in the transaction it named.
    if (claimIn) tx = ctx.completion;
    let result: string;
    try {
      result = encodeValue(value);
      checkResultSize(result, options.maxResultBytes);
    } catch (error) {
      // The effect happened; a result JSON cannot hold (a bigint, a cycle) or too large is stored
      // as a failure, so retries replay the failure instead of running the effect again.
      return this.storeFailure(record, error, options, tx, keeper, track);
    }
    const decoded = decodeValue<T>(result);
    const patch = finished('succeeded', result, options);
    track.outcome = 'executed';
    const done = await this.complete(record, patch, options, tx, keeper, decoded, undefined, track);
    if (this.hooks) await this.at('completed', record);
    return { value: decoded, replayed: false, record: done };
  }

  /**
   * Stores the failure `error` as the call's outcome, then throws it: a failure the policy keeps,
   * or a result that cannot be kept (not JSON, too large) of an effect that happened.
   */
  private async storeFailure(
    record: StoredRecord,
    error: unknown,
    options: ResolvedOptions,
    tx: unknown,
    keeper: LeaseKeeper | undefined,
    track: Track,
  ): Promise<never> {
    track.outcome = 'failed_stored';
    await this.complete(
      record,
      finished('failed', encodeError(error), options),
      options,
      tx,
      keeper,
      undefined,
      error,
      track,
    );
    throw error;
  }

  /**
   * Writes the outcome if this caller still holds the claim (its fence). A record turned unknown
   * meanwhile is still ours to settle: the late outcome is the answer a reconciler would look for.
   * Returns the record as written: its times count from the store's clock when the write applied,
   * so it equals what the store holds and every replay returns, field for field.
   */
  private async complete(
    record: StoredRecord,
    patch: RecordPatch,
    options: ResolvedOptions,
    tx: unknown,
    keeper: LeaseKeeper | undefined,
    // The outcome, carried by OUTCOME_NOT_STORED if it cannot be written: a value, or a failure to store.
    value: unknown,
    failure: unknown,
    track: Track,
  ): Promise<PublicRecord> {
    const holder: Expectation = { fence: record.fence, states: COMPLETABLE };
    let applied: number | null;
    try {
      applied = await this.write(track, tx, (t) => this.store.update(record, holder, patch, t, RELATIVE));
    } catch (error) {
      track.outcome = 'store_unavailable';
      // The function ran: a store failure now is not "nothing ran". Inside a caller's transaction a
      // failed statement dooms it, so there is nothing to retry there.
      if (OncelyError.is(error) || tx !== undefined || !keeper) throw completionFailure(error, record, value, failure);
      applied = await this.retryCompletion(record, holder, patch, options, keeper, error, value, failure, track);
      track.outcome = patch.state === 'succeeded' ? 'executed' : 'failed_stored';
    }
    if (applied === null) {
      track.outcome = 'lease_lost';
      throw new LeaseLostError(record.key, record.action);
    }
    const done = publicRecord(record, absolute(patch, applied));
    if (tx === undefined) this.cache?.set(done, patch.result ?? null);
    return done;
  }

  /**
   * Retries a completion the store failed, with backoff, for `completionRetry`, renewing the lease
   * meanwhile so nobody takes the claim over while its outcome is on the way. A write whose answer
   * was lost may have landed: a refusal is checked against the record before it counts as lost.
   * Answers the store's clock the completion applied at, or null when the claim was lost.
   */
  private async retryCompletion(
    record: StoredRecord,
    holder: Expectation,
    patch: RecordPatch,
    options: ResolvedOptions,
    keeper: LeaseKeeper,
    first: unknown,
    value: unknown,
    failure: unknown,
    track: Track,
  ): Promise<number | null> {
    const deadline = Date.now() + options.completionRetryMs;
    let pause = COMPLETION_RETRY_FIRST_MS;
    let last = first;
    keeper.resume();
    try {
      while (Date.now() < deadline) {
        await sleep(Math.min(pause, Math.max(deadline - Date.now(), 1)));
        pause = Math.min(pause * 2, COMPLETION_RETRY_MAX_MS);
        try {
          const applied = await this.write(track, undefined, (t) =>
            this.store.update(record, holder, patch, t, RELATIVE),
          );
          if (applied !== null) return applied;
          const stored = await this.write(track, undefined, (t) => this.store.get(record, t));
          // An earlier attempt landed: it set updatedAt to the time it applied at (0 from its now).
          const landed =
            stored?.fence === record.fence && stored.state === patch.state && stored.result === patch.result;
          return landed ? stored.updatedAt : null;
        } catch (error) {
          if (OncelyError.is(error)) throw error;
          last = error;
        }
      }
    } finally {
      keeper.stop();
    }
    throw completionFailure(last, record, value, failure);
  }

  /** Tells the test hooks a window of `record`'s execution was reached. */
  private at(window: CrashWindow, record: StoredRecord): void | Promise<void> {
    return this.hooks?.(window, { tenant: record.tenant, action: record.action, key: record.key, fence: record.fence });
  }

  /** A record write of a call: in `tx`, or (claim first, no transaction named) in one of claimIn's own. */
  private write<R>(track: Track, tx: unknown, op: (tx: unknown) => Promise<R>): Promise<R> {
    return tx === undefined && track.claimIn ? track.claimIn(op) : op(tx);
  }

  /** The stored outcome, as a duplicate gets it; `record` becomes the caller's. */
  private replay<T>(record: PublicRecord, result: string | null): RunResult<T> {
    if (record.state === 'failed') throw decodeError(result, record);
    return { value: decodeValue<T>(result), replayed: true, record };
  }

  private recordId(action: string, key: string, tenant: string | undefined): RecordId {
    if (action !== this.lastAction) this.lastAction = validateName(action, 'action');
    return {
      tenant: tenant === undefined ? this.tenant : validateName(tenant, 'tenant'),
      action,
      key: validateKey(key),
    };
  }

  private assertOpen(): void {
    if (this.closed) throw new OncelyError('CLOSED', 'this oncely instance is closed');
  }

  /** Store failures become STORE_UNAVAILABLE; oncely's own errors pass through. */
  private call<R>(operation: () => Promise<R>): Promise<R> {
    // Not an async function: one derived promise per store call instead of an async frame's
    // several (every first execution makes two of these calls, every replay one).
    try {
      return operation().catch(rethrowStoreFailure);
    } catch (error) {
      return Promise.reject(storeFailure(error));
    }
  }
}

/** Creates an engine on a store. */
export async function createOncely(options: OncelyOptions): Promise<Oncely> {
  // Spans start from the first call: the optional OpenTelemetry API has been looked for by then.
  await tracingReady();
  return new Oncely(options);
}

/** A store's failure as the caller sees it: oncely's own errors as they are, others as STORE_UNAVAILABLE. */
function storeFailure(error: unknown): OncelyError {
  return OncelyError.is(error) ? error : new StoreUnavailableError(error);
}

function rethrowStoreFailure(error: unknown): never {
  throw storeFailure(error);
}

/** An expectation that the record is still exactly as it was read: same fence, state and lease. */
function seenAs(record: StoredRecord): Expectation {
  return { fence: record.fence, states: [record.state], leaseUntil: record.leaseUntil };
}

/** States in which a holder may still write its outcome. */
const COMPLETABLE = ['in_progress', 'unknown'] as const;

/** A failed completion as its caller sees it: the function ran, so OUTCOME_NOT_STORED with its outcome. */
function completionFailure(error: unknown, record: StoredRecord, value: unknown, failure: unknown): OncelyError {
  if (OncelyError.is(error) && error.code !== 'STORE_UNAVAILABLE') return error;
  return new OutcomeNotStoredError(record.key, record.action, error, { value, failure });
}

/** The relative patch of a finished record: completed now, expiring a TTL from now. */
function finished(state: 'succeeded' | 'failed', result: string, options: ResolvedOptions): RecordPatch {
  return { state, result, leaseUntil: null, completedAt: 0, updatedAt: 0, expiresAt: options.ttlMs };
}

/**
 * What one call found and did, filled in as it goes: its one outcome (store_unavailable until
 * something else is known, since any store failure ends the call there), whether its key found a
 * record, whether it took a claim over.
 */
class Track implements CountedCall {
  readonly surface: Surface;
  readonly action: string;
  readonly key: string;
  readonly givenRequestId: string | undefined;
  readonly tenant: string;
  /** The request's claimIn: claim-first writes go through it. */
  readonly claimIn: ClaimIn | undefined;
  outcome: CallOutcome = 'store_unavailable';
  found = false;
  takenOver = false;
  record: StoredRecord | PublicRecord | undefined;
  ctx: ExecutionContext | undefined;
  span: Span | undefined;

  constructor(request: RunRequest, tenant: string) {
    this.surface = request.surface ?? 'engine';
    this.action = request.action;
    this.key = request.key;
    this.tenant = tenant;
    this.givenRequestId = request.requestId;
    this.claimIn = request.claimIn;
  }

  private ownId: string | undefined;

  /** The attempt's id: the caller's, the execution's, or a new one for a call that did not execute. */
  requestId(): string {
    if (this.ctx) return this.ctx.requestId;
    this.ownId ??= this.givenRequestId ?? randomUUID();
    return this.ownId;
  }

  /** The id already given or made (a takeover's decision made one): the execution keeps it. */
  knownRequestId(): string | undefined {
    return this.ownId ?? this.givenRequestId;
  }
}

/** The code and message of an error, as a decision carries it. */
function errorFields(error: unknown): { code?: string; message: string } {
  const e = error as { code?: unknown; message?: unknown };
  const message = typeof e?.message === 'string' ? e.message : String(error);
  return typeof e?.code === 'string' ? { code: e.code, message } : { message };
}
