import { LeaseLostError } from '../core/errors.js';
import type { StoredRecord } from '../core/record.js';
import { keepRenewing, type Renewable, renewalPeriod, stopRenewing } from '../core/renewals.js';
import type { RecordPatch, RecordStore, WriteOptions } from '../store.js';

/** Runs `write` in a transaction of its own, committed when it resolves (a RunRequest's `claimIn`). */
export type ClaimIn = <R>(write: (tx: unknown) => Promise<R>) => Promise<R>;

// Renewals write the lease as a duration from the store's clock (see WriteOptions).
const RELATIVE: WriteOptions = { relative: true };

/**
 * Keeps a claim alive while its function runs: renews the lease every third of its length, and
 * aborts `signal` when a renewal finds the claim taken over or the lease ran out unrenewed.
 */
export class LeaseKeeper implements Renewable {
  // Created on first use: an AbortController per execution costs more than the rest of the engine.
  private controller: AbortController | undefined;
  private lost: LeaseLostError | undefined;
  private stopped = false;
  // When the lease runs out by this process's clock: from when the last successful write was sent,
  // so it never ends later than the store's own reckoning. Only ever compared with Date.now().
  private expires: number;
  private readonly period: number;
  /** When the next renewal is due (epoch ms). */
  dueAt: number;

  constructor(
    private readonly store: RecordStore,
    private readonly record: StoredRecord,
    private readonly leaseMs: number,
    claimedAt: number,
    // Claim first: each renewal in a transaction of the run's claimIn (on SQLite never beside an open one).
    private readonly claimIn?: ClaimIn,
  ) {
    this.expires = claimedAt + leaseMs;
    this.period = renewalPeriod(leaseMs);
    this.dueAt = Date.now() + this.period;
    keepRenewing(this);
  }

  /** Renews now, and schedules the next renewal a period later whatever this one's outcome. */
  renew(now: number): void {
    this.dueAt = now + this.period;
    void this.write(now);
  }

  private async write(sent: number): Promise<void> {
    const patch: RecordPatch = { leaseUntil: this.leaseMs, updatedAt: 0 };
    try {
      const renewal = (tx: unknown) =>
        this.store.update(this.record, { fence: this.record.fence, states: ['in_progress'] }, patch, tx, RELATIVE);
      const applied = await (this.claimIn ? this.claimIn(renewal) : renewal(undefined));
      // A renewal answered after the function settled (and its outcome was written) has nothing to keep.
      if (this.stopped) return;
      if (applied !== null) this.expires = sent + this.leaseMs;
      else this.lose();
    } catch {
      // A store outage is not a takeover; only give up once the lease has really run out.
      if (!this.stopped && Date.now() >= this.expires) this.lose();
    }
  }

  /** Aborts with LEASE_LOST once the claim is lost. */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.lost) this.controller.abort(this.lost);
    }
    return this.controller.signal;
  }

  private lose(): void {
    this.stop();
    if (this.lost) return;
    this.lost = new LeaseLostError(this.record.key, this.record.action);
    this.controller?.abort(this.lost);
  }

  /** Stops renewing; called once the function settled. */
  stop(): void {
    this.stopped = true;
    stopRenewing(this);
  }

  /** Renews again (from now on) while a failed completion is retried, so the claim is kept meanwhile. */
  resume(): void {
    if (this.lost) return;
    this.stopped = false;
    this.dueAt = Date.now();
    keepRenewing(this);
  }
}
