import { createHash } from 'node:crypto';
import { backoffDelay, sleep } from '../core/backoff.js';
import { type Clock, systemClock } from '../core/clock.js';
import { isContractError, OncelyError } from '../core/errors.js';
import { validateEventType, validateKey } from '../core/key.js';
import { type IntakeSurface, processMetrics } from '../core/metrics.js';
import { type DecisionEvent, Observer, type OncelyLogger } from '../core/observer.js';
import { endSpan, startSpan, withSpan } from '../core/tracing.js';
import { migrate } from '../db/migrate.js';
import type { Db, Sql } from '../db/types.js';
import { type Claim, type RetryPlan, type Statement, WorkQueue } from '../work/index.js';
import type { ClaimedFirst } from './claim-first.js';
import { applyEvent, type ConsumerBinding, defer } from './event-delivery.js';
import * as q from './event-sql.js';
import { logFailure } from './failure-log.js';
import { type Count, Totals } from './totals.js';
import type { EventOutcome, HostEvent } from './types.js';

export type { ConsumerBinding } from './event-delivery.js';
export type { DeadLetter, EventStatus, StoredEvent } from './event-sql.js';

/** Options of an EventQueue; every duration is in milliseconds. */
export interface EventQueueOptions {
  /** The consumer of an event type; undefined stores the event as `no_consumer`. */
  consumerFor(source: string, type: string): ConsumerBinding | undefined;
  /** Attempts before an event is dead-lettered; default 8. */
  maxAttempts?: number;
  /** Exponential backoff base, with full jitter; default 500. */
  baseDelayMs?: number;
  /** Longest delay between attempts; default 60_000. */
  maxDelayMs?: number;
  /** A claimed event whose worker died is claimed again after this; default 30_000. */
  leaseMs?: number;
  /** Events one queue processes at once; default 16. */
  batchSize?: number;
  /** How often the loop looks for due events when nothing woke it; default 250. */
  pollMs?: number;
  /** Errors of the queue itself (database down, a claim refused); default console.error. */
  onError?: (error: unknown) => void;
  /** One line per conflict (an event id arriving again with another body); default console.warn. */
  onConflict?: (message: string) => void;
  /** Where a consumer's failures go (one entry each: source, type, event id, attempt, error); default one stderr line. */
  logger?: OncelyLogger;
  /** Decisions (duplicate, conflict, stale, dead letter) and spans; default: counted, not logged. */
  observer?: Observer;
  /** Where outcomes are counted, in the transaction of each; default totals of the process's metrics. */
  totals?: Totals;
  /**
   * What receipt times, due times, leases and backoff are judged by (a test's manual clock: a
   * failed event's retry comes due, a dead worker's lease runs out, when the test advances it).
   * The statements take the time as a value, never the database's now(), so this holds on SQLite
   * and PostgreSQL alike. Polls, wake-ups and drain's timeout stay on real timers. Default the system clock.
   */
  clock?: Clock;
}

const OUTCOMES: readonly EventOutcome[] = [
  'accepted',
  'duplicate',
  'conflict',
  'applied',
  'stale',
  'retrying',
  'dead_lettered',
  'replayed_from_dead_letter',
  'deferred',
];
const MAX_ERROR_LENGTH = 2_000;

/** The `type` label of events whose type no consumer declares (metrics, totals, `GET /v1/stats`). */
export const UNDECLARED_TYPE = '(other)';

const all = <R>(sql: Sql, { text, values }: Statement) => sql.all<R>(text, values);
// Events per statement of intakeMany: 9 placeholders each, far below SQLite's and PostgreSQL's bounds.
const INTAKE_CHUNK = 200;
const run = (sql: Sql, { text, values }: Statement) => sql.run(text, values);

// Kept here too: the event queue exported it first.
export { backoffDelay };

/** How an event reached `EventQueue.intake`: the surface its duplicates count under, the trace id it carries. */
export interface IntakeOptions {
  /** Default 'webhook'. */
  surface?: IntakeSurface;
  /** The intent's trace id from the sender (a header, the outbox row); consumers run under it. */
  traceId?: string;
}

/**
 * Persisted event intake and delivery: events are stored first, then consumed asynchronously with
 * bounded retries and dead letters. Several processes on one PostgreSQL share the work.
 * @example
 * const queue = new EventQueue(db, { consumerFor: (source, type) => consumers[`${source}/${type}`] });
 * await queue.migrate();
 * queue.start();
 * await queue.intake('shop', 'evt_1', 'order.paid', { orderId: 'ORD-1' }); // 'accepted'
 */
export class EventQueue {
  private readonly maxAttempts: number;
  private readonly baseDelayMs: number;
  private readonly maxDelayMs: number;
  private readonly work: WorkQueue<q.ClaimedRow>;
  private readonly batchSize: number;
  private readonly pollMs: number;
  private readonly onError: (error: unknown) => void;
  private readonly onConflict: (message: string) => void;
  private readonly observer: Observer;
  private readonly totals: Totals;
  private readonly clock: Clock;
  private readonly inFlight = new Set<Promise<void>>();
  private loop: Promise<void> | undefined;
  private stopping = false;
  private wakeUp: (() => void) | undefined;
  private woken = false;
  // When waiting events are next looked for: at most once a poll, or at once when one is due here.
  private promoteAt = 0;

  constructor(
    private readonly db: Db,
    private readonly options: EventQueueOptions,
  ) {
    this.maxAttempts = positive(options.maxAttempts ?? 8, 'maxAttempts');
    this.baseDelayMs = positive(options.baseDelayMs ?? 500, 'baseDelayMs');
    this.maxDelayMs = positive(options.maxDelayMs ?? 60_000, 'maxDelayMs');
    this.clock = options.clock ?? systemClock;
    // No renewals: the processing transaction's row lock (PostgreSQL) or write lock (SQLite) keeps
    // other workers off an event for as long as its consumer runs, and a renewal would wait on it.
    this.work = new WorkQueue(db, q.EVENT_WORK, {
      maxAttempts: this.maxAttempts,
      baseDelayMs: this.baseDelayMs,
      maxDelayMs: this.maxDelayMs,
      leaseMs: positive(options.leaseMs ?? 30_000, 'leaseMs'),
      clock: this.clock,
    });
    this.batchSize = positive(options.batchSize ?? 16, 'batchSize');
    this.pollMs = positive(options.pollMs ?? 250, 'pollMs');
    this.onError = options.onError ?? ((error) => console.error('oncely event queue:', error));
    this.onConflict = options.onConflict ?? ((message) => console.warn(message));
    this.observer = options.observer ?? new Observer({ logger: options.logger });
    this.totals = options.totals ?? new Totals(db, processMetrics);
  }

  /** Creates or upgrades the queue's tables; safe to run from several processes at once. */
  async migrate(): Promise<void> {
    await migrate(this.db, q.eventMigrations);
  }

  /**
   * Stores an event unless (source, id) is already stored. Pass `tx` to store it in the caller's
   * transaction (an outbox relay, a handler); otherwise it commits before this resolves. A repeat
   * whose type and data differ from the stored event is a `conflict`: counted, logged, not stored.
   * A `duplicate` is also an intercepted duplicate of the four rates, under `surface` (how it came).
   */
  async intake(
    source: string,
    id: string,
    type: string,
    data: unknown,
    tx?: Sql,
    { surface = 'webhook', traceId }: IntakeOptions = {},
  ): Promise<'accepted' | 'duplicate' | 'conflict'> {
    validateKey(id);
    validateEventType(type);
    if (typeof source !== 'string' || source.length === 0 || source.includes('/'))
      throw new OncelyError('INVALID_ARGUMENT', 'an event source must be a non-empty name without "/"');
    const payload = JSON.stringify(data ?? null);
    const hash = bodyHash(type, payload);
    const insert = async (sql: Sql, count: Count) => {
      const now = this.clock.now();
      const inserted = await run(sql, q.insertEvent(source, id, type, payload, hash, now, traceId));
      const outcome = inserted > 0 ? 'accepted' : await this.repeated(sql, source, id, hash);
      await count('oncely_events_total', [source, this.label(source, type), outcome]);
      if (outcome === 'duplicate')
        await count('oncely_duplicates_total', [surface, `${source}/${this.label(source, type)}`, 'true']);
      return outcome;
    };
    const outcome = tx
      ? await insert(tx, (name, labels, n) => this.totals.countIn(tx, name, labels, n))
      : await this.totals.transaction((sql, counts) => insert(sql, counts.count));
    if (outcome === 'accepted') this.wake();
    else this.decide({ decision: outcome, source, type, id });
    if (outcome === 'conflict')
      this.onConflict(
        `oncely event queue: ${source}/${id} arrived again with another body (conflict); the first is kept`,
      );
    return outcome;
  }

  /**
   * Stores several events of one source in the caller's transaction, as `intake` does each, with
   * a few statements for the whole batch instead of a few per event: one multi-row INSERT, one read
   * of the repeats' bodies, one count per type and outcome. Answers each event's outcome in order;
   * a repeat of an id earlier in the same batch is a duplicate (or conflict) of it. An event's
   * `traceId` (its sender's, as `intake` takes it) is stored with it: its consumer runs under it.
   */
  async intakeMany(
    source: string,
    events: readonly { id: string; type: string; data: unknown; traceId?: string }[],
    tx: Sql,
  ): Promise<('accepted' | 'duplicate' | 'conflict')[]> {
    if (typeof source !== 'string' || source.length === 0 || source.includes('/'))
      throw new OncelyError('INVALID_ARGUMENT', 'an event source must be a non-empty name without "/"');
    const rows = events.map(({ id, type, data, traceId }) => {
      validateKey(id);
      validateEventType(type);
      const payload = JSON.stringify(data ?? null);
      return { id, type, payload, hash: bodyHash(type, payload), traceId: traceId ?? null };
    });
    const inserted = new Set<string>();
    // Chunks keep each statement well under the databases' bound on placeholders.
    for (let from = 0; from < rows.length; from += INTAKE_CHUNK) {
      const chunk = rows.slice(from, from + INTAKE_CHUNK);
      for (const row of await all<{ event_id: string }>(tx, q.insertEvents(source, chunk, this.clock.now())))
        inserted.add(row.event_id);
    }
    const outcomes: ('accepted' | 'duplicate' | 'conflict')[] = [];
    const repeats: number[] = [];
    for (const [i, row] of rows.entries()) {
      if (inserted.delete(row.id)) outcomes.push('accepted');
      else {
        outcomes.push('duplicate');
        repeats.push(i);
      }
    }
    if (repeats.length > 0) {
      const ids = [...new Set(repeats.map((i) => (rows[i] as (typeof rows)[number]).id))];
      const stored = new Map<string, string>();
      for (let from = 0; from < ids.length; from += INTAKE_CHUNK) {
        const found = await all<{ event_id: string; type: string; body_hash: string | null; payload: string | null }>(
          tx,
          q.readBodyHashes(source, ids.slice(from, from + INTAKE_CHUNK)),
        );
        for (const r of found) stored.set(r.event_id, r.body_hash ?? bodyHash(r.type, r.payload ?? 'null'));
      }
      for (const i of repeats) {
        const row = rows[i] as (typeof rows)[number];
        const hash = stored.get(row.id);
        if (hash !== undefined && hash !== row.hash) outcomes[i] = 'conflict';
      }
    }
    const groups = new Map<string, { type: string; outcome: string; n: number }>();
    for (const [i, outcome] of outcomes.entries()) {
      const type = this.label(source, (rows[i] as (typeof rows)[number]).type);
      const group = groups.get(`${type}\n${outcome}`) ?? { type, outcome, n: 0 };
      group.n++;
      groups.set(`${type}\n${outcome}`, group);
    }
    for (const { type, outcome, n } of groups.values()) {
      await this.totals.countIn(tx, 'oncely_events_total', [source, type, outcome], n);
      // The batch path is the broker inbox's.
      if (outcome === 'duplicate')
        await this.totals.countIn(tx, 'oncely_duplicates_total', ['broker', `${source}/${type}`, 'true'], n);
    }
    if (outcomes.includes('accepted')) this.wake();
    for (const [i, outcome] of outcomes.entries()) {
      if (outcome === 'accepted') continue;
      const { id, type } = rows[i] as (typeof rows)[number];
      this.decide({ decision: outcome, source, type, id });
      if (outcome === 'conflict')
        this.onConflict(
          `oncely event queue: ${source}/${id} arrived again with another body (conflict); the first is kept`,
        );
    }
    return outcomes;
  }

  /** Starts the polling loop; intake() and replay() wake it early. */
  start(): void {
    if (this.loop) return;
    this.stopping = false;
    this.loop = this.run().finally(() => {
      this.loop = undefined;
    });
  }

  /** Stops claiming and waits for the events in flight to finish. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.wake();
    await this.loop;
    await Promise.allSettled([...this.inFlight]);
  }

  /**
   * Processes events until none is pending or processing (waiting out retries and leases of other
   * workers), for tests and demos; `waiting` events due are checked, the rest are not waited for.
   * Throws DRAIN_TIMEOUT if some still are after `timeoutMs`.
   */
  async drain(timeoutMs = 30_000): Promise<void> {
    // The timeout is real time; when an event is next due is the queue's clock (a manual one may never get there).
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      this.promoteAt = 0;
      const claimed = await this.claimAndProcess(this.batchSize);
      await Promise.allSettled([...this.inFlight]);
      if (claimed > 0) continue;
      const [row] = await all<{ open: number | string; next_at: number | string | null }>(this.db, q.openEvents());
      if (!row || Number(row.open) === 0) return;
      const realNow = Date.now();
      if (realNow >= deadline)
        throw new OncelyError('DRAIN_TIMEOUT', `${row.open} event(s) still pending or processing after ${timeoutMs}ms`);
      const now = this.clock.now();
      const nextAt = row.next_at === null ? now + this.pollMs : Number(row.next_at);
      await sleep(Math.max(1, Math.min(nextAt - now, this.pollMs, deadline - realNow)));
    }
  }

  /** Events that used up their attempts, in the order they arrived. */
  async deadLetters(): Promise<q.DeadLetter[]> {
    return (await all<Record<string, unknown>>(this.db, q.listDead())).map(q.toDeadLetter);
  }

  /** Puts dead letters back in the queue with the same event id and no attempts; returns how many. */
  async replay(target: readonly { source: string; id: string }[] | 'all'): Promise<number> {
    const now = this.clock.now();
    const replayed = await this.totals.transaction(async (tx, { count }) => {
      const rows: { source: string; type: string }[] = [];
      if (target === 'all') rows.push(...(await all<{ source: string; type: string }>(tx, q.replayAllDead(now))));
      else
        for (const { source, id } of target)
          rows.push(...(await all<{ source: string; type: string }>(tx, q.replayOneDead(source, id, now))));
      const byType = new Map<string, [string, string, number]>();
      for (const { source, type: stored } of rows) {
        const type = this.label(source, stored);
        const at = JSON.stringify([source, type]);
        const seen = byType.get(at);
        if (seen) seen[2]++;
        else byType.set(at, [source, type, 1]);
      }
      for (const [source, type, n] of byType.values())
        await count('oncely_events_total', [source, type, 'replayed_from_dead_letter'], n);
      return rows.length;
    });
    if (replayed > 0) this.wake();
    return replayed;
  }

  /** How often each outcome happened, over every source and type, since the tables were created. */
  async stats(): Promise<Record<EventOutcome, number>> {
    const counts = Object.fromEntries(OUTCOMES.map((o) => [o, 0])) as Record<EventOutcome, number>;
    for (const [outcome, n] of Object.entries(await this.totals.by('oncely_events_total', 'outcome')))
      if ((OUTCOMES as readonly string[]).includes(outcome)) counts[outcome as EventOutcome] = n;
    return counts;
  }

  /** One stored event, or null. */
  async get(source: string, id: string): Promise<q.StoredEvent | null> {
    const [row] = await all<Record<string, unknown>>(this.db, q.readEvent(source, id));
    return row ? q.toStoredEvent(row) : null;
  }

  private async run(): Promise<void> {
    while (!this.stopping) {
      this.woken = false;
      const free = this.batchSize - this.inFlight.size;
      if (free > 0) {
        try {
          await this.claimAndProcess(free);
        } catch (error) {
          this.onError(error);
        }
      }
      // A wake-up that came during the claim is not lost: it is seen here.
      if (this.woken || this.stopping) continue;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, this.pollMs);
        function done() {
          clearTimeout(timer);
          resolve();
        }
        this.wakeUp = done;
      });
      this.wakeUp = undefined;
    }
  }

  /**
   * Claims due events now instead of at the next poll. An intake in a caller's transaction wakes
   * the queue before that commits, when a claim may not see the rows yet: the caller wakes it again
   * once committed (the broker inbox does).
   */
  wake(): void {
    this.woken = true;
    this.wakeUp?.();
  }

  /** Claims up to n due events and starts processing them; returns how many it claimed. */
  private async claimAndProcess(n: number): Promise<number> {
    const now = this.clock.now();
    if (now >= this.promoteAt) {
      this.promoteAt = now + this.pollMs;
      await run(this.db, q.dueWaits(this.db.dialect, now));
    }
    const rows = await this.work.claim(n, q.claimable(now));
    // One statement claimed them; its RETURNING order is not the claim's ORDER BY.
    rows.sort((a, b) => Number(a.row.received_at) - Number(b.row.received_at));
    for (const row of rows) {
      const work = this.process(row).catch((error) => this.onError(error));
      this.inFlight.add(work);
      void work.finally(() => {
        this.inFlight.delete(work);
        // Refill in chunks rather than one claim per finished event.
        if (this.inFlight.size <= this.batchSize / 2) this.wake();
      });
    }
    return rows.length;
  }

  private async process(claim: Claim<q.ClaimedRow>): Promise<void> {
    const { row, attempts } = claim;
    try {
      // Past maxAttempts only through lease expiries: the event may be what kills its workers.
      if (attempts > this.maxAttempts)
        throw new Error(`the worker of attempt ${this.maxAttempts} (the last) stopped before finishing it`);
      const event: HostEvent = {
        id: row.event_id,
        source: row.source,
        type: row.type,
        data: JSON.parse(row.payload),
        receivedAt: Number(row.received_at),
        attempt: attempts,
        ...(row.trace_id === null ? {} : { traceId: row.trace_id }),
      };
      const binding = this.options.consumerFor(event.source, event.type);
      // last_error cleared: an applied event shows no failure of an earlier attempt.
      if (!binding) {
        await this.work.complete(this.db, claim, 'no_consumer', { last_error: null });
        return;
      }
      await this.consume(binding, event, claim);
    } catch (error) {
      // Fenced: if the commit went through after all, or another worker took over, this changes nothing.
      await this.fail(claim, error);
    }
  }

  /**
   * One delivery to the consumer, in one transaction with the event's completion and its counts,
   * under one span. Its type has a consumer, so it is counted under its own label.
   */
  private async consume(binding: ConsumerBinding, event: HostEvent, claim: Claim<q.ClaimedRow>): Promise<void> {
    const span = startSpan(this.observer.activeTracer, 'oncely.consume', {
      'oncely.source': event.source,
      'oncely.type': event.type,
      'oncely.event_id': event.id,
      'oncely.attempt': event.attempt,
    });
    // 'fenced_off': another worker claimed the event since; this delivery wrote nothing.
    let outcome = 'fenced_off' as EventOutcome | 'fenced_off';
    let claimed: ClaimedFirst | undefined;
    let wait: { nextAt: number; reason: string } | undefined;
    let woke = false;
    try {
      claimed = await binding.claimFirst?.(event);
      await withSpan(span, () =>
        this.totals.transaction(async (tx, counts) => {
          // The fence checked inside the transaction the consumer writes in: its writes commit with
          // the event's completion, or not at all when another worker claimed the event since.
          if (!(await this.work.hold(tx, claim))) return;
          const result = await applyEvent(binding, event, claim, tx, counts, this.clock, claimed);
          if ('reason' in result) {
            const delays = { baseDelayMs: this.baseDelayMs, maxDelayMs: this.maxDelayMs };
            const deferred = await defer(this.work, delays, tx, claim, result, this.clock.now());
            await counts.count('oncely_events_total', [event.source, event.type, deferred.outcome]);
            outcome = deferred.outcome;
            if (deferred.outcome === 'deferred') wait = { nextAt: deferred.nextAt, reason: result.reason };
            else wait = { nextAt: 0, reason: deferred.error };
            return;
          }
          // Settled: it no longer holds back later versions of its aggregate.
          const cleared = claim.row.wait_aggregate === null ? {} : { wait_aggregate: null, wait_version: null };
          await this.work.complete(tx, claim, result.outcome, { last_error: null, ...cleared });
          await counts.count('oncely_events_total', [event.source, event.type, result.outcome]);
          if (binding.ordering) await counts.count('oncely_events_ordered_total', [event.source, event.type]);
          outcome = result.outcome;
          woke = result.woke;
        }),
      );
    } catch (error) {
      // After the rollback: a claim-first record is released (or its failure stored) on its own.
      if (claimed?.kind === 'claimed') await claimed.abandon(error);
      const dead = this.plan(claim, error).dead;
      endSpan(span, { 'oncely.outcome': dead ? 'dead_lettered' : 'retrying' }, error);
      throw error;
    }
    // Stale or fenced off, the consumer did not complete: its claim is released (nothing after a completion).
    if (claimed?.kind === 'claimed') await claimed.abandon(new Error(`event ${event.id} was ${outcome}, not applied`));
    endSpan(span, { 'oncely.outcome': outcome });
    const decided = { source: event.source, type: event.type, id: event.id };
    if (outcome === 'stale') this.decide({ decision: 'stale', ...decided });
    if (woke) this.wake();
    if (!wait) return;
    if (outcome === 'dead_lettered') {
      this.decide({ decision: 'dead_lettered', ...decided, attempt: event.attempt, error: wait.reason });
      this.wake();
      return;
    }
    this.decide({ decision: 'deferred', ...decided, error: wait.reason });
    setTimeout(
      () => {
        this.promoteAt = 0;
        this.wake();
      },
      Math.max(0, wait.nextAt - this.clock.now()),
    ).unref();
  }

  /**
   * What a failed delivery leads to. A contract error (the event itself is wrong: KEY_REQUIRED,
   * VALUE_INVALID, ...) fails the same way on every attempt and nobody can fix the request, so it
   * is a dead letter at once; anything else retries with backoff until its last attempt.
   */
  private plan(claim: Claim<q.ClaimedRow>, error: unknown, now = this.clock.now()): RetryPlan {
    return isContractError(error) ? { dead: true, nextAttemptAt: now } : this.work.plan(claim, now);
  }

  private async fail(claim: Claim<q.ClaimedRow>, error: unknown): Promise<void> {
    const { row, attempts } = claim;
    const now = this.clock.now();
    const plan = this.plan(claim, error, now);
    const { dead, nextAttemptAt: next } = plan;
    const then = dead ? 'dead-lettered' : `retry in ${next - now} ms`;
    logFailure(
      this.options.logger,
      'consumer failed',
      `${row.source}/${row.type} event ${row.event_id}, attempt ${attempts} of ${this.maxAttempts}, ${then}`,
      {
        source: row.source,
        type: row.type,
        eventId: row.event_id,
        attempt: attempts,
        maxAttempts: this.maxAttempts,
        deadLettered: dead,
        retryInMs: dead ? null : next - now,
      },
      error,
    );
    const failed = await this.totals.transaction(async (tx, { count }) => {
      if (!(await this.work.fail(tx, claim, plan, describe(error)))) return false;
      await count('oncely_events_total', [
        row.source,
        this.label(row.source, row.type),
        dead ? 'dead_lettered' : 'retrying',
      ]);
      return true;
    });
    if (failed && dead)
      this.decide({
        decision: 'dead_lettered',
        source: row.source,
        type: row.type,
        id: row.event_id,
        attempt: attempts,
        error: describe(error),
      });
    if (!dead) setTimeout(() => this.wake(), next - now).unref();
  }

  /**
   * The type label an event is counted under: its own where a consumer declares it, else
   * UNDECLARED_TYPE. Types come from senders; each label is a series kept for the life of the
   * process and a totals row, so only the app's own types may add one.
   */
  private label(source: string, type: string): string {
    return this.options.consumerFor(source, type) ? type : UNDECLARED_TYPE;
  }

  /** Hands a decision about an event to the observer: its logger and hook, when it has them. */
  private decide(d: { decision: string; source: string; type: string; id: string; attempt?: number; error?: string }) {
    if (!this.observer.listening) return;
    const event: DecisionEvent = {
      decision: d.decision,
      surface: 'events',
      action: d.type,
      key: d.id,
      detail: { source: d.source },
    };
    if (d.attempt !== undefined) event.attempt = d.attempt;
    if (d.error !== undefined) event.error = { message: d.error };
    this.observer.decide(event);
  }

  /** A repeat of a stored event: a plain duplicate, or a conflict when its body differs. */
  private async repeated(sql: Sql, source: string, id: string, hash: string): Promise<'duplicate' | 'conflict'> {
    const [row] = await all<{ body_hash: string | null; type: string; payload: string | null }>(
      sql,
      q.readBodyHash(source, id),
    );
    if (!row) return 'duplicate';
    const stored = row.body_hash ?? bodyHash(row.type, row.payload ?? 'null');
    return stored === hash ? 'duplicate' : 'conflict';
  }
}

// The stored JSON text, not the raw body: a sender's retry sends the same bytes, which parse and
// serialize to the same text, and the outbox (which has no raw body) is compared the same way.
function bodyHash(type: string, payload: string): string {
  return createHash('sha256').update(type).update('\n').update(payload).digest('hex');
}

function describe(error: unknown): string {
  const text =
    error instanceof Error
      ? `${error.name}${'code' in error && error.code ? ` ${String(error.code)}` : ''}: ${error.message}`
      : String(error);
  return text.length > MAX_ERROR_LENGTH ? `${text.slice(0, MAX_ERROR_LENGTH)}…` : text;
}

function positive(value: number, name: string): number {
  if (!Number.isFinite(value) || value <= 0) throw new OncelyError('INVALID_ARGUMENT', `${name} must be positive`);
  return value;
}
