import { LeaseLostError } from '../core/errors.js';
import type { StoredRecord } from '../core/record.js';
import type { RecordStore } from '../store.js';

/**
 * Keeps a claim alive while its function runs: renews the lease every third of its length, and
 * aborts `signal` when a renewal finds the claim taken over or the lease ran out unrenewed.
 */
export class LeaseKeeper {
  // Created on first use: an AbortController per execution costs more than the rest of the engine.
  private controller: AbortController | undefined;
  private lost: LeaseLostError | undefined;
  private timer: NodeJS.Timeout | undefined;
  private leaseUntil: number;

  constructor(
    private readonly store: RecordStore,
    private readonly record: StoredRecord,
    private readonly leaseMs: number,
  ) {
    this.leaseUntil = record.leaseUntil ?? 0;
    this.timer = setInterval(() => void this.renew(), Math.max(Math.floor(leaseMs / 3), 5));
    this.timer.unref();
  }

  /** The lease end as last written, which a completion does not need but a takeover check does. */
  get until(): number {
    return this.leaseUntil;
  }

  private async renew(): Promise<void> {
    const next = Date.now() + this.leaseMs;
    try {
      const kept = await this.store.update(
        this.record,
        { fence: this.record.fence, states: ['in_progress'] },
        { leaseUntil: next, updatedAt: Date.now() },
      );
      if (kept) this.leaseUntil = next;
      else this.lose();
    } catch {
      // A store outage is not a takeover; only give up once the lease has really run out.
      if (Date.now() >= this.leaseUntil) this.lose();
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
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}
