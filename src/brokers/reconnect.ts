/**
 * The connection life every broker source and target shares: its state as `oncely serve` reports
 * it, one log line per change of state (never one per failed attempt), and the loop that runs a
 * session again with full-jitter backoff after the connection was lost, until stopped.
 */
import { backoffDelay } from '../core/backoff.js';
import type { OncelyLogger } from '../core/observer.js';
import { errorText } from '../host/failure-log.js';
import type { SourceState, SourceStatus } from './types.js';

/** How long a source waits between connection attempts; every duration is in milliseconds. */
export interface ReconnectOptions {
  /** The first delays' ceiling (full jitter); default 200. */
  baseDelayMs?: number;
  /** The longest delay; default 10_000. */
  maxDelayMs?: number;
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
  { baseDelayMs = 200, maxDelayMs = 10_000 }: ReconnectOptions = {},
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
    await wait(backoffDelay(attempt, baseDelayMs, maxDelayMs));
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
