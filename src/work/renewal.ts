/**
 * Keeps claims alive on one timer per process, armed for the earliest renewal due (the engine's
 * lease keeper does the same for records): a timer per claim costs more than most claims live,
 * since most settle long before their first renewal and only ever join and leave this set.
 */
const kept = new Set<Kept>();
let timer: NodeJS.Timeout | undefined;
let armedFor = Number.POSITIVE_INFINITY;

function arm(at: number): void {
  if (timer && at >= armedFor) return;
  if (timer) clearTimeout(timer);
  armedFor = at;
  // unref: work in flight keeps the process alive through its own promise, not this timer.
  timer = setTimeout(renewDue, Math.max(at - Date.now(), 1));
  timer.unref();
}

function renewDue(): void {
  timer = undefined;
  armedFor = Number.POSITIVE_INFINITY;
  const now = Date.now();
  let next = Number.POSITIVE_INFINITY;
  for (const claim of kept) {
    if (claim.dueAt <= now) claim.renew(now);
    if (claim.dueAt < next) next = claim.dueAt;
  }
  if (next !== Number.POSITIVE_INFINITY) arm(next);
}

/** Whether a kept claim still holds, and how to stop keeping it. */
export interface Held {
  /** False once a renewal found the row claimed again, or the lease ran out unrenewed. */
  holds(): boolean;
  /** Stops renewing (the claim settled, or is about to be). */
  stop(): void;
}

/**
 * One kept claim: `write` extends the lease and answers whether the fenced row was still held.
 * Renewed every third of the lease.
 */
export class Kept implements Held {
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
    this.period = Math.max(Math.floor(leaseMs / 3), 5);
    this.dueAt = now + this.period;
    kept.add(this);
    arm(this.dueAt);
  }

  renew(now: number): void {
    this.dueAt = now + this.period;
    this.write(now + this.leaseMs).then(
      (held) => {
        if (!kept.has(this)) return;
        if (held) this.expires = now + this.leaseMs;
        else this.lose();
      },
      () => {
        // A database outage is not a takeover; only give up once the lease has really run out.
        if (kept.has(this) && Date.now() >= this.expires) this.lose();
      },
    );
  }

  holds(): boolean {
    return !this.lost;
  }

  stop(): void {
    kept.delete(this);
  }

  private lose(): void {
    this.lost = true;
    this.stop();
  }
}
