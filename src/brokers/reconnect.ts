/**
 * The connection life every broker source and target shares: its state as `oncely serve` reports
 * it, one log line per change of state (never one per failed attempt), and the loop that runs a
 * session again with full-jitter backoff after the connection was lost, until stopped.
 */
import { backoffDelay } from '../core/backoff.js';
import type { Duration } from '../core/duration.js';
import { durationOption } from '../core/duration-option.js';
import type { OncelyLogger } from '../core/observer.js';
import { errorText } from '../host/failure-log.js';
import type { SourceState, SourceStatus } from './types.js';

/** How long a source waits between connection attempts. */
export interface ReconnectOptions {
  /** The base of the full-jitter backoff between connection attempts; default '200ms'. */
  backoff?: Duration;
  /** The longest delay between connection attempts; default '10s'. */
  maxBackoff?: Duration;
  /** @deprecated Write `backoff`; goes in 0.2.0. */
  baseDelayMs?: number;
  /** @deprecated Write `maxBackoff`; goes in 0.2.0. */
  maxDelayMs?: number;
}

/** The reconnect delays of a source, in milliseconds. */
export interface ReconnectDelays {
  baseMs: number;
  maxMs: number;
}

/** Reads `backoff` and `maxBackoff` (or their deprecated names) of a source's options; CONFIG_INVALID naming `where` when unusable. */
export function reconnectDelays(options: ReconnectOptions, where: string): ReconnectDelays {
  return {
    baseMs: durationOption(options, 'backoff', 'baseDelayMs', '200ms', where, 'CONFIG_INVALID'),
    maxMs: durationOption(options, 'maxBackoff', 'maxDelayMs', '10s', where, 'CONFIG_INVALID'),
  };
}

/** A source's or target's state, lag and last error; logs each change of state once. */
export class ConnectionLife {
  private current: SourceState = 'stopped';
  private lastError: string | undefined;
  /** Messages the broker holds for this consumer, where it tells; set by the source. */
  lag: number | undefined;

  constructor(
    /** What the log lines name: `rabbitmq source orders`. */
    private readonly label: string,
    private readonly logger: OncelyLogger | undefined,
  ) {}

  get state(): SourceState {
    return this.current;
  }

  /** Moves to `state`; a change is logged once (a loss as a warning with its error), a repeat is not. */
  set(state: SourceState, error?: unknown): void {
    if (error !== undefined) this.lastError = errorText(error);
    if (state === 'connected') this.lastError = undefined;
    if (state === this.current) return;
    const from = this.current;
    this.current = state;
    if (!this.logger) return;
    const fields = { broker: this.label, from, state, ...(this.lastError ? { error: this.lastError } : {}) };
    if (state === 'reconnecting') this.logger.warn(fields, `oncely ${this.label} lost its connection`);
    else this.logger.info(fields, `oncely ${this.label} ${state}`);
  }

  status(): SourceStatus {
    return {
      state: this.current,
      ...(this.lag !== undefined && this.current === 'connected' ? { lag: this.lag } : {}),
      ...(this.lastError !== undefined && this.current !== 'connected' ? { lastError: this.lastError } : {}),
    };
  }
}

/**
 * Runs `session` until `stopped()`: a session connects, sets the life to connected, and returns or
 * throws when its connection ends. Then the life is `reconnecting` and the next attempt waits a
 * full-jitter delay that grows with each attempt that never connected. `wait` is interruptible:
 * it resolves early when the caller stops.
 */
export async function keepConnected(
  life: ConnectionLife,
  stopped: () => boolean,
  session: () => Promise<void>,
  wait: (ms: number) => Promise<void>,
  { baseMs, maxMs }: ReconnectDelays,
): Promise<void> {
  let attempt = 0;
  while (!stopped()) {
    let lost: unknown = new Error('the broker closed the connection');
    try {
      await session();
    } catch (error) {
      lost = error;
    }
    if (stopped()) break;
    // A session that got connected starts the delays over: only attempts that never connected grow them.
    attempt = life.state === 'connected' ? 1 : attempt + 1;
    life.set(life.state === 'connecting' ? 'connecting' : 'reconnecting', lost);
    await wait(backoffDelay(attempt, baseMs, maxMs));
  }
}

/** A sleep that `wake()` cuts short, so stop() does not wait out a reconnect delay. */
export class Pause {
  private wakeUp: (() => void) | undefined;

  /** Resolves after `ms`, or at the next wake(). */
  wait = (ms: number): Promise<void> =>
    new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      const self = this;
      function done() {
        clearTimeout(timer);
        if (self.wakeUp === done) self.wakeUp = undefined;
        resolve();
      }
      this.wakeUp = done;
    });

  wake(): void {
    this.wakeUp?.();
  }
}
