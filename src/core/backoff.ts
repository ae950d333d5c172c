/**
 * Delay before the next attempt: full jitter, a uniform draw in [0, min(maxMs, baseMs * 2^(attempt-1))).
 * Full jitter rather than a fixed exponential: retries of many rows that failed together spread out
 * instead of arriving together again.
 * @param attempt the attempt that just failed, from 1
 * @example backoffDelay(3, 500, 60_000) // somewhere in [0, 2000)
 */
export function backoffDelay(
  attempt: number,
  baseMs: number,
  maxMs: number,
  random: () => number = Math.random,
): number {
  // 2^52 already passes any maxMs; the exponent is capped so it never reaches Infinity.
  const ceiling = Math.min(maxMs, baseMs * 2 ** Math.min(Math.max(attempt - 1, 0), 52));
  return Math.floor(random() * ceiling);
}

/** Resolves after `ms` milliseconds. */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
