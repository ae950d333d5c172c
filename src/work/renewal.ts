import { isRenewing, keepRenewing, type Renewable, renewalPeriod, stopRenewing } from '../core/renewals.js';

/** Whether a kept claim still holds, and how to stop keeping it. */
export interface Held {
  /** False once a renewal found the row claimed again, or the lease ran out unrenewed. */
  holds(): boolean;
  /** Stops renewing (the claim settled, or is about to be). */
  stop(): void;
}

/**
 * One kept claim: `write` extends the lease and answers whether the fenced row was still held.
 * Renewed every third of the lease, on the process's one renewal timer (core/renewals.ts), the
 * same one that keeps the engine's record leases.
 */
export class Kept implements Held, Renewable {
  dueAt: number;
  private expires: number;
  private lost = false;
  private readonly period: number;

  constructor(
    private readonly leaseMs: number,
    private readonly write: (leaseUntil: number) => Promise<boolean>,
  ) {
    const now = Date.now();
    this.expires = now + leaseMs;
    this.period = renewalPeriod(leaseMs);
    this.dueAt = now + this.period;
    keepRenewing(this);
  }

  renew(now: number): void {
    this.dueAt = now + this.period;
    this.write(now + this.leaseMs).then(
      (held) => {
        if (!isRenewing(this)) return;
        if (held) this.expires = now + this.leaseMs;
        else this.lose();
      },
      () => {
        // A database outage is not a takeover; only give up once the lease has really run out.
        if (isRenewing(this) && Date.now() >= this.expires) this.lose();
      },
    );
  }

  holds(): boolean {
    return !this.lost;
  }

  stop(): void {
    stopRenewing(this);
  }

  private lose(): void {
    this.lost = true;
    this.stop();
  }
}
