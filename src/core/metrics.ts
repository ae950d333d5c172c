/**
 * oncely's metrics: one catalogue of names, label sets and meanings, and the in-process cells that
 * count them. Counting is a Map lookup and an addition, so every surface counts every decision;
 * exporters (`oncely/prometheus`, the host's database totals) read the cells, never the hot path.
 * Tenants are never label values: their number is unbounded.
 */

import { InvalidArgumentError } from './errors.js';

/** Where a call came from: the engine's own API, or the surface that called it. */
export type Surface = 'engine' | 'http' | 'handler' | 'consumer' | 'tool' | 'flow' | 'scan' | DuplicateSurface;

/**
 * Where a duplicate was stopped before any engine call: an event id seen before at intake (a
 * webhook, a broker message, the outbox's own delivery) or a flow start that found its run.
 */
export type DuplicateSurface = IntakeSurface | 'flow_start';
/** How an event reached the event queue. */
export type IntakeSurface = 'webhook' | 'broker' | 'outbox';

/**
 * The one outcome of each engine call (`run`, `wrap`, and every surface built on them):
 * executed (ran, outcome stored), replayed (a stored outcome answered), in_progress (refused: another
 * caller holds the key), key_reused (refused: same key, other input), released (ran, failed, key freed),
 * failed_stored (ran, failed, failure stored), lease_lost (ran, claim taken meanwhile), unknown
 * (refused: outcome unknown under 'hold'), store_unavailable (the store failed, before or after running).
 */
export const CALL_OUTCOMES = [
  'executed',
  'replayed',
  'in_progress',
  'key_reused',
  'released',
  'failed_stored',
  'lease_lost',
  'unknown',
  'store_unavailable',
] as const;
export type CallOutcome = (typeof CALL_OUTCOMES)[number];

/** Seconds buckets of the duration histograms: a replay takes microseconds, an execution up to its lease. */
export const DURATION_BUCKETS = [
  0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
] as const;

interface MetricSpec {
  readonly type: 'counter' | 'histogram' | 'gauge';
  readonly help: string;
  readonly labels: readonly string[];
}

/** Every metric oncely exports. Names follow Prometheus conventions; the README's list is checked against it. */
export const METRICS = {
  oncely_calls_total: {
    type: 'counter',
    help: 'Engine calls by their one outcome (executed, replayed, in_progress, key_reused, released, failed_stored, lease_lost, unknown, store_unavailable)',
    labels: ['surface', 'action', 'outcome'],
  },
  oncely_key_hits_total: {
    type: 'counter',
    help: 'Engine calls whose key found an existing, unexpired record',
    labels: ['surface', 'action'],
  },
  oncely_duplicates_total: {
    type: 'counter',
    help: 'Duplicates of an intent: intercepted="true" answered without executing (a replay, a refusal, an event id seen before at intake, a flow start that found its run), "false" executed again (a takeover after a lease ran out, or one found by a duplicate scan)',
    labels: ['surface', 'action', 'intercepted'],
  },
  oncely_takeovers_total: {
    type: 'counter',
    help: 'Claims taken over from a holder whose lease ran out',
    labels: ['surface', 'action'],
  },
  oncely_execution_seconds: {
    type: 'histogram',
    help: 'Time of an execution: the function and the write of its outcome',
    labels: ['surface', 'action'],
  },
  oncely_replay_seconds: {
    type: 'histogram',
    help: 'Time to answer a duplicate with the stored outcome',
    labels: ['surface', 'action'],
  },
  oncely_events_total: {
    type: 'counter',
    help: 'Events by outcome: accepted, duplicate, conflict, applied, stale, retrying, dead_lettered, replayed_from_dead_letter, deferred (put back to waiting: prerequisite not met)',
    labels: ['source', 'type', 'outcome'],
  },
  oncely_events_ordered_total: {
    type: 'counter',
    help: 'Events consumed under declared ordering (applied or dropped as stale)',
    labels: ['source', 'type'],
  },
  oncely_outbox_total: {
    type: 'counter',
    help: 'Outbox messages by outcome: enqueued, delivered, retried (the relay retries a message until it is delivered)',
    labels: ['topic', 'outcome'],
  },
  oncely_flows_total: {
    type: 'counter',
    help: 'Flow runs by outcome: started, already (a start that found the run), completed, failed',
    labels: ['flow', 'outcome'],
  },
  oncely_flow_steps_total: {
    type: 'counter',
    help: 'Flow steps by outcome: executed, memoized (answered from its stored memo), retried (an attempt failed, tried again), failed (for good)',
    labels: ['flow', 'outcome'],
  },
  oncely_compensations_total: {
    type: 'counter',
    help: "Compensations by surface and outcome (succeeded, failed): a failed flow's compensating steps (surface flow, name the flow), a tool's credit reservation given back after its call failed (surface tool, name the tool)",
    labels: ['surface', 'name', 'outcome'],
  },
  oncely_versions_total: {
    type: 'counter',
    help: "Versioned writes (the data store's applyVersion) by outcome: applied, stale (dropped: the stored version is as new or newer)",
    labels: ['table', 'outcome'],
  },
  oncely_tool_calls_total: {
    type: 'counter',
    help: "Agent tool calls (call, approve, reject) by the envelope's delivery state: sent, already_sent, read, pending_approval, rejected, failed, unknown; tool '' when the name is no declared tool",
    labels: ['tool', 'state'],
  },
  oncely_approvals_total: {
    type: 'counter',
    help: 'Agent approvals by decision: requested, approved, rejected, expired',
    labels: ['tool', 'decision'],
  },
  oncely_credits_total: {
    type: 'counter',
    help: "Agent credit reservations by outcome: reserved, confirmed, released; tool '' for the sweep's releases",
    labels: ['tool', 'outcome'],
  },
  oncely_reconciled_total: {
    type: 'counter',
    help: "Unknown or stalled records answered by a reconcile function or a person, by answer: value, error, retry (settled), unknown (left for later), failed (the function threw); settler 'reconciler' or 'person'",
    labels: ['action', 'answer', 'settler'],
  },
  oncely_records_awaiting: {
    type: 'gauge',
    help: 'Unknown or stalled records whose action has no reconcile function, waiting for a person, as of the last reconcile pass',
    labels: ['action', 'state'],
  },
  oncely_purged_total: {
    type: 'counter',
    help: 'Rows deleted by retention, by table',
    labels: ['table'],
  },
  oncely_admin_actions_total: {
    type: 'counter',
    help: 'Admin API requests by action (records.resolve, events.replay, ...) and outcome: done, refused (bad input or a state that does not allow it), denied (no or a wrong token, or off loopback without one), failed (the database failed)',
    labels: ['action', 'outcome'],
  },
} as const satisfies Record<string, MetricSpec>;

export type MetricName = keyof typeof METRICS;
export type CounterName = { [K in MetricName]: (typeof METRICS)[K]['type'] extends 'counter' ? K : never }[MetricName];
export type GaugeName = { [K in MetricName]: (typeof METRICS)[K]['type'] extends 'gauge' ? K : never }[MetricName];
export type HistogramName = {
  [K in MetricName]: (typeof METRICS)[K]['type'] extends 'histogram' ? K : never;
}[MetricName];

/** One labelled series: its label values in the catalogue's order, and its value (a counter) or buckets (a histogram). */
export interface Series {
  readonly labels: readonly string[];
  value: number;
  /** Histograms: observations at or under each of DURATION_BUCKETS, not cumulative. */
  readonly buckets?: number[];
  /** Histograms: the sum of the observations, in seconds. */
  sum: number;
}

// Label values are joined with a character no action, topic or flow name may hold (names are validated).
const SEP = '\u0001';

/**
 * The cells of every metric of one process (or of one test). Counting never throws and never
 * allocates once a series exists.
 */
export class Metrics {
  private readonly byName = new Map<MetricName, Map<string, Series>>();

  /** `enabled: false` counts nothing (the baseline of the benchmarks). */
  constructor(readonly enabled = true) {}

  /** Adds `n` to the counter series of `labels` (values in the catalogue's label order). */
  add(name: CounterName, labels: readonly string[], n = 1): void {
    if (this.enabled) this.series(name, labels).value += n;
  }

  /** Sets the gauge series of `labels` to `value`. */
  set(name: GaugeName, labels: readonly string[], value: number): void {
    if (this.enabled) this.series(name, labels).value = value;
  }

  /** Records one duration in seconds. */
  observe(name: HistogramName, labels: readonly string[], seconds: number): void {
    if (this.enabled) observeInto(this.series(name, labels), seconds);
  }

  /**
   * The live series of `labels`, made if new: a hot path keeps it and adds to `value` (or calls
   * `observeInto`) itself, skipping the lookup. It stays valid across `reset`.
   */
  series(name: MetricName, labels: readonly string[]): Series {
    let byLabels = this.byName.get(name);
    if (!byLabels) {
      byLabels = new Map();
      this.byName.set(name, byLabels);
    }
    const id = labels.length === 1 ? (labels[0] as string) : labels.join(SEP);
    let cell = byLabels.get(id);
    if (!cell) {
      const histogram = METRICS[name].type === 'histogram';
      cell = {
        labels: [...labels],
        value: 0,
        sum: 0,
        ...(histogram ? { buckets: new Array<number>(DURATION_BUCKETS.length + 1).fill(0) } : {}),
      };
      byLabels.set(id, cell);
    }
    return cell;
  }

  /** The series of one metric, as they are now (live objects: copy what must not change). */
  read(name: MetricName): readonly Series[] {
    return [...(this.byName.get(name)?.values() ?? [])];
  }

  /** The value of one counter series, 0 when never counted. */
  value(name: CounterName, labels: readonly string[]): number {
    return this.byName.get(name)?.get(labels.join(SEP))?.value ?? 0;
  }

  /**
   * The sum of a counter over every series whose labels match `where` (label name to value). A
   * label the metric does not have is INVALID_ARGUMENT: a misspelt filter must not read as zero.
   */
  sum(name: CounterName, where: Record<string, string> = {}): number {
    const names = METRICS[name].labels as readonly string[];
    const wanted = Object.entries(where).map(([label, value]) => {
      const i = names.indexOf(label);
      if (i < 0) throw new InvalidArgumentError(`${name} has no label "${label}" (its labels: ${names.join(', ')})`);
      return [i, value] as const;
    });
    let total = 0;
    for (const series of this.byName.get(name)?.values() ?? [])
      if (wanted.every(([i, value]) => series.labels[i] === value)) total += series.value;
    return total;
  }

  /** Sets every series to zero, in place: series kept by hot paths stay the ones read. */
  reset(): void {
    for (const byLabels of this.byName.values())
      for (const cell of byLabels.values()) {
        cell.value = 0;
        cell.sum = 0;
        cell.buckets?.fill(0);
      }
  }
}

/** Records one duration in seconds into a histogram series. */
export function observeInto(cell: Series, seconds: number): void {
  cell.value += 1;
  cell.sum += seconds;
  const buckets = cell.buckets as number[];
  let i = 0;
  while (i < DURATION_BUCKETS.length && seconds > (DURATION_BUCKETS[i] as number)) i++;
  buckets[i] = (buckets[i] as number) + 1;
}

/** The metrics of this process: what every surface counts into unless given its own. */
export const processMetrics = new Metrics();

/** The four rates of the method, each with its target. NaN when nothing was counted yet. */
export interface Rates {
  /** Duplicates answered without executing / all duplicates. Target at least 0.999. */
  duplicateInterception: number;
  /** Keyed calls that found an existing record / all keyed calls. */
  keyHit: number;
  /** Events dropped as stale / events consumed under declared ordering. */
  staleDrop: number;
  /** Compensations that succeeded / compensations attempted. */
  compensationSuccess: number;
}

/** Targets of the rates where the method sets one. */
export const RATE_TARGETS = { duplicateInterception: 0.999, compensationSuccess: 1 } as const;

/** Totals the four rates are computed from: a process's metrics, or the host's database totals. */
export interface RateTotals {
  duplicatesIntercepted: number;
  duplicates: number;
  keyHits: number;
  calls: number;
  staleEvents: number;
  orderedEvents: number;
  compensationsSucceeded: number;
  compensations: number;
}

/** The totals of the four rates in `metrics`. */
export function rateTotals(metrics: Metrics): RateTotals {
  return {
    duplicatesIntercepted: metrics.sum('oncely_duplicates_total', { intercepted: 'true' }),
    duplicates: metrics.sum('oncely_duplicates_total'),
    keyHits: metrics.sum('oncely_key_hits_total'),
    calls: metrics.sum('oncely_calls_total'),
    // An ordered consumer's stale event and a handler's stale applyVersion are the same drop: an
    // older business version arriving after a newer one.
    staleEvents:
      metrics.sum('oncely_events_total', { outcome: 'stale' }) +
      metrics.sum('oncely_versions_total', { outcome: 'stale' }),
    orderedEvents: metrics.sum('oncely_events_ordered_total') + metrics.sum('oncely_versions_total'),
    compensationsSucceeded: metrics.sum('oncely_compensations_total', { outcome: 'succeeded' }),
    compensations: metrics.sum('oncely_compensations_total'),
  };
}

/** The four rates, computed one way everywhere. */
export function rates(totals: RateTotals): Rates {
  return {
    duplicateInterception: totals.duplicatesIntercepted / totals.duplicates,
    keyHit: totals.keyHits / totals.calls,
    staleDrop: totals.staleEvents / totals.orderedEvents,
    compensationSuccess: totals.compensationsSucceeded / totals.compensations,
  };
}
