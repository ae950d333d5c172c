import { Metrics, processMetrics, type Surface } from './metrics.js';
import { activeTracer, type Tracer } from './tracing.js';

/**
 * A structured logger: pino's shape (`logger.warn({ action, key }, 'message')`), which bunyan and
 * console-backed shims share. oncely logs nothing unless given one.
 */
export interface OncelyLogger {
  info(fields: Record<string, unknown>, message: string): void;
  warn(fields: Record<string, unknown>, message: string): void;
  error(fields: Record<string, unknown>, message: string): void;
}

/**
 * What a surface decided about one call, event, message, step or tool call. The engine's
 * decisions are the CallOutcome values plus `taken_over`; intake adds its own (stale,
 * dead_lettered, duplicate, ...).
 */
export interface DecisionEvent {
  decision: string;
  surface: Surface | 'events' | 'outbox';
  /** The action, event type, topic, flow or tool. */
  action: string;
  key: string;
  tenant?: string;
  /** The intent's trace id: the same for every retry of one business intent. */
  traceId?: string;
  /** This physical attempt's id. */
  requestId?: string;
  fence?: number;
  attempt?: number;
  /** Milliseconds the call took. */
  durationMs?: number;
  /** The error's code and message, when the decision is a failure. */
  error?: { code?: string; message: string };
  /** Anything the surface adds: the event source, the flow id, the tool call's state. */
  detail?: Record<string, unknown>;
}

/** Options every surface takes to be observed: a logger, a hook, the metrics to count into, a tracer. */
export interface ObserveOptions {
  /** Gets one line per non-trivial decision (replay, key reused, in progress, takeover, lease lost, unknown, stale, dead letter). */
  logger?: OncelyLogger;
  /** Gets every decision, trivial ones (executed) included. Its errors are swallowed: observing never fails a call. */
  onDecision?: (decision: DecisionEvent) => void;
  /** Where counts go; default the process's metrics (`oncely/prometheus` exports them); false: count nothing. */
  metrics?: Metrics | false;
  /** A tracer of your own; default the global provider's once registered; false: no spans. */
  tracer?: Tracer | false;
}

type Level = 'info' | 'warn' | 'error';

const NO_METRICS = new Metrics(false);

// The level of each decision worth a log line; the rest (executed and the like) go only to the hook.
const LOGGED: Record<string, Level> = {
  replayed: 'info',
  in_progress: 'info',
  key_reused: 'warn',
  taken_over: 'warn',
  lease_lost: 'error',
  unknown: 'error',
  store_unavailable: 'error',
  stale: 'info',
  dead_lettered: 'error',
  conflict: 'warn',
  flow_failed: 'error',
  step_retried: 'warn',
  compensation_failed: 'error',
  reconciled: 'info',
  reconcile_failed: 'error',
};

/** The metrics, logger, hook and tracer of one surface, shared by everything it runs. */
export class Observer {
  readonly metrics: Metrics;
  /** True when a logger or hook wants decisions: otherwise none is built. */
  readonly listening: boolean;
  private readonly logger: OncelyLogger | undefined;
  private readonly hook: ((decision: DecisionEvent) => void) | undefined;
  private readonly tracer: Tracer | false | undefined;

  constructor(options: ObserveOptions = {}) {
    this.metrics = options.metrics === false ? NO_METRICS : (options.metrics ?? processMetrics);
    this.logger = options.logger;
    this.hook = options.onDecision;
    this.tracer = options.tracer;
    this.listening = this.logger !== undefined || this.hook !== undefined;
  }

  /** The tracer to start spans on now, or undefined. */
  get activeTracer(): Tracer | undefined {
    return activeTracer(this.tracer);
  }

  /** Logs the decision if it is worth a line, and hands it to the hook. */
  decide(decision: DecisionEvent): void {
    const level = LOGGED[decision.decision];
    if (level && this.logger) {
      const { detail, ...fields } = decision;
      try {
        this.logger[level]({ ...fields, ...detail }, `oncely ${decision.surface} ${decision.decision}`);
      } catch {
        // A logger that throws must not fail the call it observes.
      }
    }
    if (this.hook) {
      try {
        this.hook(decision);
      } catch {
        // Same for the hook.
      }
    }
  }
}

/** The observer of a surface that was given none: counts into the process's metrics, logs nothing. */
export const silentObserver = new Observer();
