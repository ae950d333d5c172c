/** Something renewed on the shared timer: when it is next due, and what renewing it does. */
export interface Renewable {
  /** When the next renewal is due (epoch ms). */
  dueAt: number;
  /** Renews now; sets the next `dueAt` whatever this renewal's outcome. */
  renew(now: number): void;
}

// Every lease this process keeps (engine records, claimed events, outbox rows, flow runs), renewed
// by one timer armed for the earliest renewal due. A timer per claim costs more than most claims
// live: most settle long before their first renewal, so they only ever join and leave this set.
const kept = new Set<Renewable>();
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
  for (const item of kept) {
    if (item.dueAt <= now) item.renew(now);
    if (item.dueAt < next) next = item.dueAt;
  }
  if (next !== Number.POSITIVE_INFINITY) arm(next);
}

/** Starts renewing `item` from its `dueAt` on. */
export function keepRenewing(item: Renewable): void {
  kept.add(item);
  arm(item.dueAt);
}

/** Stops renewing `item`. */
export function stopRenewing(item: Renewable): void {
  kept.delete(item);
}

/** Whether `item` is still being renewed. */
export function isRenewing(item: Renewable): boolean {
  return kept.has(item);
}

/** The renewal period of a lease: a third of it, so two renewals may fail before it runs out. */
export function renewalPeriod(leaseMs: number): number {
  return Math.max(Math.floor(leaseMs / 3), 5);
}
