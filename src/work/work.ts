import { backoffDelay } from '../core/backoff.js';
import { type Clock, systemClock } from '../core/clock.js';
import { OncelyError } from '../core/errors.js';
import type { Db, Sql } from '../db/types.js';
import { type Held, Kept } from './renewal.js';
import * as q from './sql.js';

/** A claimed row: what the claim returned, and the fence every later write of its holder checks. */
export interface Claim<R> {
  readonly key: readonly unknown[];
  /** The attempt this holder runs (the claim counter after this claim), from 1. */
  readonly attempts: number;
  /** The claim's fence; a holder that claims its own row again adopts the newer one. */
  fence: number;
  readonly row: R;
}

/** Options of a WorkQueue; every duration is in milliseconds. */
export interface WorkOptions {
  /** How long a claim holds without renewal. */
  leaseMs: number;
  /** Attempts before a failed row is dead-lettered; default unlimited. */
  maxAttempts?: number;
  /** Backoff base of a failed row (full jitter); default 500. */
  baseDelayMs?: number;
  /** Longest delay before a failed row is due again; default 60_000. */
  maxDelayMs?: number;
  /** What leases, due times and backoff are judged by (a test's manual clock); renewals still run on real timers. Default the system clock. */
  clock?: Clock;
}

/** What happens to a failed claim: dead-lettered, or due again at `nextAttemptAt`. */
export interface RetryPlan {
  dead: boolean;
  nextAttemptAt: number;
}

/**
 * Claimed work on one table: claim due rows, keep them with renewals, settle them, fail them with
 * backoff or dead-letter them, give them back. Every write after the claim is fenced, so a holder
 * whose lease ran out and whose row another worker claimed changes nothing.
 * @example
 * const work = new WorkQueue<Row>(db, OUTBOX, { leaseMs: 30_000 });
 * for (const claim of await work.claim(32, { ready: { text: "status = 'pending'", values: [] } })) {
 *   const held = work.keep(claim);
 *   await deliver(claim.row);
 *   held.stop();
 *   if (!(await work.complete(db, claim, 'delivered', { delivered_at: Date.now() }))) console.log('taken over');
 * }
 */
export class WorkQueue<R> {
  readonly leaseMs: number;
  private readonly maxAttempts: number;
  private readonly baseDelayMs: number;
  private readonly maxDelayMs: number;
  private readonly clock: Clock;

  constructor(
    private readonly db: Db,
    readonly table: q.WorkTable,
    options: WorkOptions,
  ) {
    this.leaseMs = positive(options.leaseMs, 'leaseMs');
    this.maxAttempts = positive(options.maxAttempts ?? Number.POSITIVE_INFINITY, 'maxAttempts');
    this.baseDelayMs = positive(options.baseDelayMs ?? 500, 'baseDelayMs');
    this.maxDelayMs = positive(options.maxDelayMs ?? 60_000, 'maxDelayMs');
    this.clock = options.clock ?? systemClock;
  }

  /** Claims up to `n` rows of `scope` in one statement; each comes back with its new fence. */
  async claim(n: number, scope: q.ClaimScope, sql: Sql = this.db): Promise<Claim<R>[]> {
    const now = this.clock.now();
    const { text, values } = q.claim(this.table, sql.dialect, scope, now, now + this.leaseMs, n);
    return this.claimed(await sql.all<Record<string, unknown>>(text, values));
  }

  /** Claims the row with this key if it is `ready` (or its holder's lease ran out); null if not. */
  async claimRow(key: readonly unknown[], ready: q.Statement, sql: Sql = this.db): Promise<Claim<R> | null> {
    const now = this.clock.now();
    const { text, values } = q.claimRow(this.table, key, ready, now, now + this.leaseMs);
    return this.claimed(await sql.all<Record<string, unknown>>(text, values))[0] ?? null;
  }

  private claimed(rows: Record<string, unknown>[]): Claim<R>[] {
    return rows.map((row) => ({
      key: this.table.key.map((column) => row[column]),
      attempts: Number(row[this.table.attempts]),
      fence: Number(row.fence),
      row: row as R,
    }));
  }

  /** Renews the claim's lease on the process's one renewal timer until `stop()`. */
  keep(claim: Claim<R>): Held {
    // The lease is extended from this queue's clock, as the claim's was; the timer is real.
    return new Kept(this.leaseMs, async () => {
      const now = this.clock.now();
      const { text, values } = q.renew(this.table, claim.key, claim.fence, now + this.leaseMs, now);
      return (await this.db.run(text, values)) > 0;
    });
  }

  /**
   * Checks the fence inside the caller's transaction and locks the row until it ends: false when
   * another worker claimed the row since. Work that commits with the row's outcome does this first.
   */
  async hold(sql: Sql, claim: Claim<R>): Promise<boolean> {
    const { text, values } = q.hold(this.table, claim.key, claim.fence, this.clock.now());
    return (await sql.run(text, values)) > 0;
  }

  /** Ends the claim with `status` and the table's own columns; false (nothing written) if it no longer holds. */
  async complete(sql: Sql, claim: Claim<R>, status: string, set: Record<string, unknown> = {}): Promise<boolean> {
    const { text, values } = q.settle(this.table, claim.key, claim.fence, status, set, this.clock.now());
    return (await sql.run(text, values)) > 0;
  }

  /** What a failure of this claim leads to: full-jitter backoff, or the dead letters after maxAttempts. */
  plan(claim: Claim<R>, now = this.clock.now()): RetryPlan {
    const dead = claim.attempts >= this.maxAttempts;
    return {
      dead,
      nextAttemptAt: dead ? now : now + backoffDelay(claim.attempts, this.baseDelayMs, this.maxDelayMs),
    };
  }

  /** Fails the claim as `plan` says, keeping `error` in last_error; false if it no longer holds. */
  async fail(sql: Sql, claim: Claim<R>, plan: RetryPlan, error: string): Promise<boolean> {
    const { text, values } = q.fail(
      this.table,
      claim.key,
      claim.fence,
      plan.dead,
      plan.nextAttemptAt,
      error,
      this.clock.now(),
    );
    return (await sql.run(text, values)) > 0;
  }

  /** Gives an unstarted claim back (a worker shutting down): due at once, the attempt not counted. */
  async release(sql: Sql, claim: Claim<R>): Promise<boolean> {
    const { text, values } = q.release(this.table, claim.key, claim.fence, this.clock.now());
    return (await sql.run(text, values)) > 0;
  }
}

function positive(value: number, name: string): number {
  if (Number.isNaN(value) || value <= 0) throw new OncelyError('INVALID_ARGUMENT', `${name} must be positive`);
  return value;
}
