import {
  CALL_OUTCOMES,
  type CallOutcome,
  type Metrics,
  observeInto,
  type Series,
  type Surface,
} from '../core/metrics.js';

/** The series one (surface, action) counts into, looked up once: a call then only adds. */
interface ActionSeries {
  calls: Record<CallOutcome, Series>;
  hits: Series;
  intercepted: Series;
  notIntercepted: Series;
  takeovers: Series;
  execution: Series;
  replay: Series;
}

/** One call as counted: its outcome, whether its key found a record, whether it took a claim over. */
export interface CountedCall {
  surface: Surface;
  action: string;
  outcome: CallOutcome;
  found: boolean;
  takenOver: boolean;
}

/** Outcomes that count as an intercepted duplicate when the call found the intent's record. */
const INTERCEPTED: ReadonlySet<CallOutcome> = new Set(['replayed', 'in_progress', 'unknown']);
/** Outcomes of a call that ran the function. */
export const RAN: ReadonlySet<CallOutcome> = new Set(['executed', 'released', 'failed_stored', 'lease_lost']);

/**
 * The engine's counts of its calls. Every outcome's series is made with the first call of an
 * action, so each shows as 0 until it happens (rates and alerts need the series to exist).
 */
export class CallCounts {
  private readonly bySurface = new Map<Surface, Map<string, ActionSeries>>();

  constructor(private readonly metrics: Metrics) {}

  /** Counts one call that took `seconds`. */
  count(call: CountedCall, seconds: number): void {
    if (!this.metrics.enabled) return;
    const s = this.of(call.surface, call.action);
    const { outcome } = call;
    s.calls[outcome].value++;
    if (call.found) s.hits.value++;
    if (call.takenOver) {
      s.takeovers.value++;
      s.notIntercepted.value++;
    } else if (call.found && INTERCEPTED.has(outcome)) s.intercepted.value++;
    if (outcome === 'replayed') observeInto(s.replay, seconds);
    else if (RAN.has(outcome)) observeInto(s.execution, seconds);
  }

  private of(surface: Surface, action: string): ActionSeries {
    let byAction = this.bySurface.get(surface);
    if (!byAction) {
      byAction = new Map();
      this.bySurface.set(surface, byAction);
    }
    let s = byAction.get(action);
    if (!s) {
      const m = this.metrics;
      const labels = [surface, action];
      const calls = {} as Record<CallOutcome, Series>;
      for (const outcome of CALL_OUTCOMES) calls[outcome] = m.series('oncely_calls_total', [surface, action, outcome]);
      s = {
        calls,
        hits: m.series('oncely_key_hits_total', labels),
        intercepted: m.series('oncely_duplicates_total', [surface, action, 'true']),
        notIntercepted: m.series('oncely_duplicates_total', [surface, action, 'false']),
        takeovers: m.series('oncely_takeovers_total', labels),
        execution: m.series('oncely_execution_seconds', labels),
        replay: m.series('oncely_replay_seconds', labels),
      };
      byAction.set(action, s);
    }
    return s;
  }
}
