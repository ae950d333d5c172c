import { LeaseLostError } from '../core/errors.js';
import type { StoredRecord } from '../core/record.js';
import type { RecordPatch, RecordStore, WriteOptions } from '../store.js';

// Renewals write the lease as a duration from the store's clock (see WriteOptions).
const RELATIVE: WriteOptions = { relative: true };

// Every running execution's keeper, renewed by one timer armed for the earliest renewal due. A
// timer per execution cost more than the rest of a short execution; most finish long before
// their first renewal, so they only ever join and leave this set.
const running = new Set<LeaseKeeper>();
let timer: NodeJS.Timeout | undefined;
let armedFor = Number.POSITIVE_INFINITY;

function arm(at: number): void {
  if (timer && at >= armedFor) return;
  if (timer) clearTimeout(timer);
  armedFor = at;
  // unref: a running execution keeps the process alive through its own promise, not this timer.
  timer = setTimeout(renewDue, Math.max(at - Date.now(), 1));
  timer.unref();
}

function renewDue(): void {
  timer = undefined;
  armedFor = Number.POSITIVE_INFINITY;
  const now = Date.now();
  let next = Number.POSITIVE_INFINITY;
  for (const keeper of running) {
    if (keeper.dueAt <= now) keeper.renew(now);
    if (keeper.dueAt < next) next = keeper.dueAt;
  }
  if (next !== Number.POSITIVE_INFINITY) arm(next);
}

/**
 * Keeps a claim alive while its function runs: renews the lease every third of its length, and
 * aborts `signal` when a renewal finds the claim taken over or the lease ran out unrenewed.
 */
export class LeaseKeeper {
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
  ) {
    this.expires = claimedAt + leaseMs;
    this.period = Math.max(Math.floor(leaseMs / 3), 5);
    this.dueAt = Date.now() + this.period;
    running.add(this);
    arm(this.dueAt);
  }

  /** Renews now, and schedules the next renewal a period later whatever this one's outcome. */
  renew(now: number): void {
    this.dueAt = now + this.period;
    void this.write(now);
  }

  private async write(sent: number): Promise<void> {
    const patch: RecordPatch = { leaseUntil: this.leaseMs, updatedAt: 0 };
    try {
      const applied = await this.store.update(
        this.record,
        { fence: this.record.fence, states: ['in_progress'] },
        patch,
        undefined,
        RELATIVE,
      );
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
    running.delete(this);
  }

  /** Renews again (from now on) while a failed completion is retried, so the claim is kept meanwhile. */
  resume(): void {
    if (this.lost) return;
    this.stopped = false;
    this.dueAt = Date.now();
    running.add(this);
    arm(this.dueAt);
  }
}
