import type { Clock } from '../core/clock.js';
import { type Duration, toMs } from '../core/duration.js';
import { InvalidArgumentError } from '../core/errors.js';

/** A clock that moves only when the test says: give it to `createOncely({ clock })` and `sqliteStore({ clock })`. */
export interface ManualClock extends Clock {
  /** Moves the clock forward by a duration ('31s', or milliseconds). */
  advance(by: Duration): void;
  /** Sets the clock to an epoch time in milliseconds (never backwards). */
  set(ms: number): void;
}

/**
 * A manual clock starting at `start` (default the real now): lease expiry, TTLs and backoff in
 * milliseconds of a test instead of minutes of waiting.
 * @example const clock = manualClock(); const once = await createOncely({ store: sqliteStore({ path, clock }), clock }); clock.advance('31s');
 */
export function manualClock(start: number = Date.now()): ManualClock {
  let now = start;
  return {
    now: () => now,
    advance(by) {
      const ms = toMs(by, 'advance');
      if (ms < 0) throw new InvalidArgumentError('a manual clock only moves forward');
      now += ms;
    },
    set(ms) {
      if (!Number.isFinite(ms) || ms < now) throw new InvalidArgumentError('a manual clock only moves forward');
      now = ms;
    },
  };
}
