import { describe, expect, it } from 'vitest';
import { backoffDelay } from '../../src/core/backoff.js';
import type { Db } from '../../src/db/types.js';
import { WorkQueue } from '../../src/work/index.js';
import { ITEMS } from './support/targets.js';

const ceiling = (attempt: number, base: number, max: number) => Math.min(max, base * 2 ** (attempt - 1));

describe('backoff (full jitter)', () => {
  it('stays within [0, min(max, base * 2^(n-1))) at every attempt, and reaches near both ends', () => {
    for (const [base, max] of [
      [100, 5_000],
      [500, 60_000],
      [1, 1],
    ] as const) {
      for (let attempt = 1; attempt <= 40; attempt++) {
        const cap = ceiling(attempt, base, max);
        expect(backoffDelay(attempt, base, max, () => 0)).toBe(0);
        expect(backoffDelay(attempt, base, max, () => 0.999_999_9)).toBe(Math.floor(0.999_999_9 * cap));
        for (let i = 0; i < 200; i++) {
          const delay = backoffDelay(attempt, base, max);
          expect(delay).toBeGreaterThanOrEqual(0);
          expect(delay).toBeLessThanOrEqual(cap);
        }
      }
    }
    // An attempt count far past 2^52 neither overflows nor passes the cap.
    expect(backoffDelay(10_000, 100, 5_000, () => 0.5)).toBe(2_500);
  });

  it('spreads draws over the whole window rather than bunching at the cap', () => {
    const draws = Array.from({ length: 4_000 }, () => backoffDelay(5, 100, 60_000));
    const mean = draws.reduce((a, b) => a + b, 0) / draws.length;
    expect(mean).toBeGreaterThan(0.4 * 1_600);
    expect(mean).toBeLessThan(0.6 * 1_600);
  });

  it('is what a work queue plans for a failed claim, and dead-letters at maxAttempts', () => {
    // plan() never touches the database.
    const work = new WorkQueue(null as unknown as Db, ITEMS, {
      leaseMs: 1_000,
      maxAttempts: 5,
      baseDelayMs: 100,
      maxDelayMs: 1_000,
    });
    const now = 1_000_000;
    for (let attempts = 1; attempts < 5; attempts++) {
      const plan = work.plan({ key: ['x'], attempts, fence: attempts, row: {} }, now);
      expect(plan.dead).toBe(false);
      expect(plan.nextAttemptAt - now).toBeGreaterThanOrEqual(0);
      expect(plan.nextAttemptAt - now).toBeLessThanOrEqual(ceiling(attempts, 100, 1_000));
    }
    expect(work.plan({ key: ['x'], attempts: 5, fence: 5, row: {} }, now)).toEqual({ dead: true, nextAttemptAt: now });
  });
});
