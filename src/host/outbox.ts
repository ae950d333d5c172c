import { type Clock, systemClock } from '../core/clock.js';
import type { Duration } from '../core/duration.js';
import { durationOption } from '../core/duration-option.js';
import { OncelyError } from '../core/errors.js';
import { validateEventType, validateKey } from '../core/key.js';
import { processMetrics } from '../core/metrics.js';
import type { Db, Sql } from '../db/types.js';
import { type Claim, WorkQueue } from '../work/index.js';
import { dueNow, insertMessage, OUTBOX_WORK, type OutboxRow } from './outbox-sql.js';
import { Totals } from './totals.js';

/** Where the relay hands a message: the app's own consumers, or later a broker. */
export interface OutboxTarget {
  /** Delivers one message; may be called again for the same id (at least once), so the target dedupes on it. */
  deliver(message: OutboxMessage): Promise<void>;
}

/** A row of the outbox. */
export interface OutboxMessage {
  id: string;
  topic: string;
  payload: unknown;
  createdAt: number;
  /** The trace id of the intent that enqueued it, when it had one. */
  traceId?: string;
}

/**
 * Writes a message in the caller's transaction; an id already written is not written again. `now`
 * is when it is created and due (the host's clock; default the system's); `traceId` the intent's,
 * which its consumers run under.
 */
export async function enqueue(
  tx: Sql,
  id: string,
  topic: string,
  payload: unknown,
  now: number = Date.now(),
  traceId?: string,
): Promise<{ id: string; created: boolean }> {
  validateKey(id);
  // A topic becomes an event type at its consumer's intake: refused here, where the caller can see it.
  validateEventType(topic);
  const { text, values } = insertMessage(id, topic, JSON.stringify(payload ?? null), now, traceId ?? null);
  const created = await tx.run(text, values);
  return { id, created: created === 1 };
}

/** Options of the relay; a duration is a Duration: '30s', or milliseconds. */
export interface RelayOptions {
  target: OutboxTarget;
  /** How long the relay waits before looking again when it found nothing due; default '250ms'. */
  poll?: Duration;
  batchSize?: number;
  /** How long a claim of a row holds unrenewed (a dead relay's rows are taken over after it); default '30s'. */
  lease?: Duration;
  /**
   * Deliveries side by side, settled together in one transaction; default 1 (row after row). A
   * broker target pipelines them and confirms each: 32 sends a whole batch before the first confirm.
   */
  inFlight?: number;
  /** The base of the full-jitter backoff of a failed delivery; default '500ms'. */
  backoff?: Duration;
  /** The longest delay before a failed row is due again; default '60s'. */
  maxBackoff?: Duration;
  /** @deprecated Write `poll`; goes in 0.2.0. */
  pollMs?: number;
  /** @deprecated Write `lease`; goes in 0.2.0. */
  leaseMs?: number;
  /** @deprecated Write `backoff`; goes in 0.2.0. */
  baseDelayMs?: number;
  /** @deprecated Write `maxBackoff`; goes in 0.2.0. */
  maxDelayMs?: number;
  /** Where deliveries, retries and dead letters are counted, each in its completion's transaction; default totals of the process's metrics. */
  totals?: Totals;
  /**
   * What due times, leases and backoff are judged by (a test's manual clock: a relay's lease runs
   * out, a failed row's retry comes due, when the test advances it). The statements take the time
   * as a value, never the database's now(), so this holds on SQLite and PostgreSQL alike. Polls and
   * lease renewals stay on real timers. Default the system clock.
   */
  clock?: Clock;
}

const WHERE = 'outbox relay';

/**
 * Delivers committed outbox rows at least once: claims due rows with a lease (a relay that died
 * loses them after it), hands each to the target, then marks it delivered. The lease is renewed
 * while a delivery runs, and the completion is fenced: a relay that stalled past its lease, and
 * whose row another relay claimed, does not mark it again.
 */
export class OutboxRelay {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = true;
  // True while stop() waits: the rest of a claimed batch is given back instead of delivered.
  private stopping = false;
  private readonly work: WorkQueue<OutboxRow>;
  private readonly totals: Totals;
  private readonly clock: Clock;
  private readonly pollMs: number;

  constructor(
    private readonly db: Db,
    private readonly options: RelayOptions,
  ) {
    const { inFlight = 1 } = options;
    if (!Number.isSafeInteger(inFlight) || inFlight < 1)
      throw new OncelyError('INVALID_ARGUMENT', `inFlight must be a positive integer, got ${inFlight}`);
    this.totals = options.totals ?? new Totals(db, processMetrics);
    this.clock = options.clock ?? systemClock;
    this.pollMs = durationOption(options, 'poll', 'pollMs', '250ms', WHERE);
    this.work = new WorkQueue(db, OUTBOX_WORK, {
      leaseMs: durationOption(options, 'lease', 'leaseMs', '30s', WHERE),
      baseDelayMs: durationOption(options, 'backoff', 'baseDelayMs', '500ms', WHERE),
      maxDelayMs: durationOption(options, 'maxBackoff', 'maxDelayMs', '60s', WHERE),
      clock: this.clock,
    });
  }

  /** Starts polling. */
  start(): void {
    this.stopped = false;
    this.schedule(0);
  }

  /** Wakes the relay now (after a commit that enqueued). */
  wake(): void {
    if (!this.stopped && !this.running) this.schedule(0);
  }

  /** Stops polling and waits for the delivery in flight; rows claimed but not started are given back. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.stopping = true;
    clearTimeout(this.timer);
    try {
      await this.running;
    } finally {
      this.stopping = false;
    }
  }

  /**
   * Delivers everything due now; returns how many rows it claimed (delivered, failed or given back).
   * Rows go out `inFlight` at a time, in created order: a broker target pipelines them on its one
   * channel or connection, each delivery resolving at its own confirm. Each such window is then
   * settled in one transaction: a row marked delivered once confirmed, or failed with backoff.
   */
  async deliverDue(): Promise<number> {
    const claimed = await this.work.claim(this.options.batchSize ?? 32, { ready: dueNow(this.clock.now()) });
    // One statement claimed them; its RETURNING order is not the claim's ORDER BY.
    claimed.sort((a, b) => Number(a.row.created_at) - Number(b.row.created_at) || (a.row.id < b.row.id ? -1 : 1));
    const inFlight = this.options.inFlight ?? 1;
    for (let from = 0; from < claimed.length; from += inFlight) {
      const window = claimed.slice(from, from + inFlight);
      if (this.stopping) {
        for (const claim of window) await this.work.release(this.db, claim);
        continue;
      }
      const held = window.map((claim) => this.work.keep(claim));
      const delivered = await Promise.allSettled(
        window.map(({ row }) =>
          this.options.target.deliver({
            id: row.id,
            topic: row.topic,
            payload: JSON.parse(row.payload) as unknown,
            createdAt: Number(row.created_at),
            ...(row.trace_id === null ? {} : { traceId: row.trace_id }),
          }),
        ),
      );
      for (const h of held) h.stop();
      await this.settle(window, delivered);
    }
    return claimed.length;
  }

  /** Marks each claimed row as its delivery ended, fenced, in one transaction; counts once per topic and outcome. */
  private settle(claimed: Claim<OutboxRow>[], delivered: PromiseSettledResult<void>[]): Promise<void> {
    return this.totals.transaction(async (tx, { count }) => {
      const tally = new Map<string, { topic: string; outcome: string; n: number }>();
      const now = this.clock.now();
      for (const [i, claim] of claimed.entries()) {
        const result = delivered[i] as PromiseSettledResult<void>;
        let outcome: string;
        if (result.status === 'fulfilled') {
          if (!(await this.work.complete(tx, claim, 'delivered', { delivered_at: now }))) continue;
          outcome = 'delivered';
        } else {
          const reason = result.reason instanceof Error ? result.reason.message : String(result.reason);
          const plan = this.work.plan(claim, now);
          if (!(await this.work.fail(tx, claim, plan, reason))) continue;
          outcome = plan.dead ? 'dead_lettered' : 'retried';
        }
        const key = `${claim.row.topic}\n${outcome}`;
        const entry = tally.get(key) ?? { topic: claim.row.topic, outcome, n: 0 };
        entry.n++;
        tally.set(key, entry);
      }
      for (const { topic, outcome, n } of tally.values()) await count('oncely_outbox_total', [topic, outcome], n);
    });
  }

  private schedule(ms: number): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.running = this.round().finally(() => {
        this.running = undefined;
      });
    }, ms);
    this.timer.unref();
  }

  private async round(): Promise<void> {
    let delivered = 0;
    try {
      delivered = await this.deliverDue();
    } catch {
      // The database is unreachable for now; the next round tries again.
    }
    if (!this.stopped) this.schedule(delivered > 0 ? 0 : this.pollMs);
  }
}
