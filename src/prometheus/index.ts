/**
 * oncely's metrics: the catalogue, the in-process cells (`Metrics`, `processMetrics`, the cells the
 * engine's `metrics` option takes), the four rates read from them, and the cells on a prom-client
 * registry. Counting stays in oncely's own cells (a Map lookup and an addition on the hot path);
 * prom-client reads them when it is scraped.
 * @example
 * import { register } from 'prom-client';
 * import { registerMetrics } from 'oncely/prometheus';
 * registerMetrics(register); // then serve `await register.metrics()` on GET /metrics
 */
import type { MetricValue, Registry } from 'prom-client';
import { DURATION_BUCKETS, METRICS, type MetricName, type Metrics, processMetrics } from '../core/metrics.js';
import { requirePeer } from '../core/peer.js';

export {
  type CallOutcome,
  METRICS,
  Metrics,
  processMetrics,
  RATE_TARGETS,
  type Rates,
  type RateTotals,
  rates,
  rateTotals,
} from '../core/metrics.js';

type Labels = Record<string, string | number>;

/**
 * prom-client's global registry, loaded when it is the one asked for: importing this entry for its
 * cells or rates, or registering on a registry of one's own, loads no prom-client.
 */
const globalRegistry = (): Registry =>
  requirePeer<typeof import('prom-client')>('prom-client', 'registerMetrics').register;

/**
 * Registers every oncely metric on `registry` (default prom-client's global one), read from
 * `metrics` (default this process's). Registering the same names twice on one registry throws, as
 * prom-client does for its own metrics.
 */
export function registerMetrics(registry: Registry = globalRegistry(), metrics: Metrics = processMetrics): void {
  for (const name of Object.keys(METRICS) as MetricName[]) registry.registerMetric(metricOf(name, metrics) as never);
}

/** A metric object in prom-client's shape (name, help, type, get), computed from oncely's cells at each scrape. */
function metricOf(name: MetricName, metrics: Metrics) {
  const spec = METRICS[name];
  const labelNames = spec.labels as readonly string[];
  const labelsOf = (values: readonly string[]): Labels =>
    Object.fromEntries(labelNames.map((label, i) => [label, values[i] ?? '']));
  return {
    name,
    help: spec.help,
    type: spec.type,
    labelNames,
    aggregator: 'sum',
    reset: () => metrics.reset(),
    get: async () => {
      const values: MetricValue<string>[] = [];
      for (const series of metrics.read(name)) {
        const labels = labelsOf(series.labels);
        if (spec.type !== 'histogram') {
          values.push({ labels, value: series.value });
          continue;
        }
        // Prometheus buckets are cumulative: each counts the observations at or under its bound.
        let cumulative = 0;
        DURATION_BUCKETS.forEach((le, i) => {
          cumulative += series.buckets?.[i] ?? 0;
          values.push({ labels: { ...labels, le }, value: cumulative, metricName: `${name}_bucket` } as never);
        });
        values.push({ labels: { ...labels, le: '+Inf' }, value: series.value, metricName: `${name}_bucket` } as never);
        values.push({ labels, value: series.sum, metricName: `${name}_sum` } as never);
        values.push({ labels, value: series.value, metricName: `${name}_count` } as never);
      }
      return { name, help: spec.help, type: spec.type, aggregator: 'sum', values };
    },
  };
}
