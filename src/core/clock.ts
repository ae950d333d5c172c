/**
 * Where the engine reads the time: the system clock, or a test's manual clock (oncely/testing's
 * `manualClock()`), so lease expiry, TTLs and waits can be tested in milliseconds. Leases and
 * expiries are judged by the store's clock: pass the same clock to `sqliteStore({ clock })`;
 * PostgreSQL and Redis judge by their server's clock, which no clock here can move.
 */
export interface Clock {
  /** Milliseconds since the epoch, as Date.now(). */
  now(): number;
}

/** The system clock. */
export const systemClock: Clock = { now: () => Date.now() };
