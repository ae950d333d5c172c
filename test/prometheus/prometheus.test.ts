/**
 * oncely/prometheus: registerMetrics on a fresh prom-client Registry, its exposition parsed by a
 * Prometheus text parser: every catalogue name with its type and help, label sets, cumulative
 * histogram buckets up to +Inf with _sum and _count.
 */
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { DURATION_BUCKETS } from '../../src/core/metrics.js';
import { METRICS, Metrics, processMetrics, registerMetrics } from '../../src/prometheus/index.js';

async function scrape(registry: Registry) {
  const text = await registry.metrics();
  return { text, families: parsePrometheusTextFormat(text) };
}

describe('registerMetrics', () => {
  it('exposes every metric of the catalogue with its type, help and labelled series', async () => {
    const registry = new Registry();
    const metrics = new Metrics();
    registerMetrics(registry, metrics);
    metrics.add('oncely_calls_total', ['engine', 'pay', 'executed'], 2);
    metrics.add('oncely_calls_total', ['http', 'POST /orders', 'replayed'], 5);
    metrics.add('oncely_duplicates_total', ['http', 'POST /orders', 'true'], 5);
    metrics.add('oncely_events_total', ['stripe', 'invoice.paid', 'stale']);

    const { families } = await scrape(registry);
    expect(families.map((f) => f.name)).toEqual(Object.keys(METRICS));
    for (const family of families) {
      const spec = METRICS[family.name as keyof typeof METRICS];
      expect(family.type).toBe(spec.type.toUpperCase());
      expect(family.help).toBe(spec.help);
    }
    const samples = (name: string) => families.find((f) => f.name === name)?.metrics;
    expect(samples('oncely_calls_total')).toEqual([
      { labels: { surface: 'engine', action: 'pay', outcome: 'executed' }, value: '2' },
      { labels: { surface: 'http', action: 'POST /orders', outcome: 'replayed' }, value: '5' },
    ]);
    expect(samples('oncely_duplicates_total')).toEqual([
      { labels: { surface: 'http', action: 'POST /orders', intercepted: 'true' }, value: '5' },
    ]);
    expect(samples('oncely_events_total')).toEqual([
      { labels: { source: 'stripe', type: 'invoice.paid', outcome: 'stale' }, value: '1' },
    ]);
    expect(samples('oncely_takeovers_total')).toEqual([]);
    // Read at each scrape: a later count shows in the next one.
    metrics.add('oncely_calls_total', ['engine', 'pay', 'executed']);
    const again = (await scrape(registry)).families.find((f) => f.name === 'oncely_calls_total');
    expect(again?.metrics[0]?.value).toBe('3');
  });

  it('exposes histograms with cumulative buckets, +Inf, _sum and _count', async () => {
    const registry = new Registry();
    const metrics = new Metrics();
    registerMetrics(registry, metrics);
    for (const seconds of [0.0003, 0.002, 0.002, 50])
      metrics.observe('oncely_execution_seconds', ['engine', 'pay'], seconds);
    metrics.observe('oncely_replay_seconds', ['http', 'POST /orders'], 0.0001);

    const { text, families } = await scrape(registry);
    // The parser folds a histogram family into one sample of its buckets by `le` (it keeps no
    // other label, nor a labelled _sum and _count): each family here has one series, and its
    // labels, _sum and _count are read from the exposition's lines below.
    const [execution] = families.find((f) => f.name === 'oncely_execution_seconds')?.metrics ?? [];
    const expected: Record<string, string> = {};
    for (const le of DURATION_BUCKETS) expected[String(le)] = String(le < 0.0005 ? 0 : le < 0.0025 ? 1 : 3);
    expected['+Inf'] = '4';
    expect(execution).toEqual({ buckets: expected });
    const [replay] = families.find((f) => f.name === 'oncely_replay_seconds')?.metrics ?? [];
    // The bound is inclusive: an observation of exactly 0.0001 s is in le="0.0001", and in every later bucket.
    expect(Object.values(replay?.buckets ?? {})).toEqual(new Array(DURATION_BUCKETS.length + 1).fill('1'));

    const lines = text.split('\n').filter((l) => l.startsWith('oncely_execution_seconds_'));
    expect(lines).toEqual([
      ...[...DURATION_BUCKETS.map(String), '+Inf'].map(
        (le) => `oncely_execution_seconds_bucket{surface="engine",action="pay",le="${le}"} ${expected[le]}`,
      ),
      `oncely_execution_seconds_sum{surface="engine",action="pay"} ${0.0003 + 0.002 + 0.002 + 50}`,
      'oncely_execution_seconds_count{surface="engine",action="pay"} 4',
    ]);
    expect(text).toContain('oncely_replay_seconds_sum{surface="http",action="POST /orders"} 0.0001\n');
    expect(text).toContain('oncely_replay_seconds_count{surface="http",action="POST /orders"} 1\n');
  });

  it('throws when the same registry gets them twice; another registry may; reset zeroes the cells', async () => {
    const registry = new Registry();
    const metrics = new Metrics();
    registerMetrics(registry, metrics);
    expect(() => registerMetrics(registry, metrics)).toThrow(/already been registered/);
    const other = new Registry();
    registerMetrics(other, metrics);
    metrics.add('oncely_key_hits_total', ['engine', 'pay'], 2);
    const hits = async (r: Registry) =>
      (await scrape(r)).families.find((f) => f.name === 'oncely_key_hits_total')?.metrics;
    expect(await hits(other)).toEqual([{ labels: { surface: 'engine', action: 'pay' }, value: '2' }]);
    registry.resetMetrics();
    expect(metrics.value('oncely_key_hits_total', ['engine', 'pay'])).toBe(0);
  });

  it("reads the process's metrics by default", async () => {
    const registry = new Registry();
    registerMetrics(registry);
    processMetrics.add('oncely_outbox_total', ['orders', 'delivered'], 7);
    const { families } = await scrape(registry);
    expect(families.find((f) => f.name === 'oncely_outbox_total')?.metrics).toContainEqual({
      labels: { topic: 'orders', outcome: 'delivered' },
      value: String(processMetrics.value('oncely_outbox_total', ['orders', 'delivered'])),
    });
    expect(processMetrics.value('oncely_outbox_total', ['orders', 'delivered'])).toBe(7);
  });
});
