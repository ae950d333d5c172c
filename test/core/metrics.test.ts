import { describe, expect, it } from 'vitest';
import {
  DURATION_BUCKETS,
  METRICS,
  Metrics,
  observeInto,
  RATE_TARGETS,
  type RateTotals,
  rates,
  rateTotals,
} from '../../src/core/metrics.js';

const NONE: RateTotals = {
  duplicatesIntercepted: 0,
  duplicates: 0,
  keyHits: 0,
  calls: 0,
  staleEvents: 0,
  orderedEvents: 0,
  compensationsSucceeded: 0,
  compensations: 0,
};

describe('Metrics cells', () => {
  it('adds to one series per label set, 0 for a series never counted', () => {
    const m = new Metrics();
    m.add('oncely_calls_total', ['engine', 'pay', 'executed']);
    m.add('oncely_calls_total', ['engine', 'pay', 'executed'], 4);
    m.add('oncely_calls_total', ['http', 'pay', 'executed']);
    m.add('oncely_key_hits_total', ['engine', 'pay'], 2);
    expect(m.value('oncely_calls_total', ['engine', 'pay', 'executed'])).toBe(5);
    expect(m.value('oncely_calls_total', ['http', 'pay', 'executed'])).toBe(1);
    expect(m.value('oncely_calls_total', ['engine', 'pay', 'replayed'])).toBe(0);
    expect(m.value('oncely_key_hits_total', ['engine', 'pay'])).toBe(2);
    expect(m.value('oncely_takeovers_total', ['engine', 'pay'])).toBe(0);
    expect(m.read('oncely_calls_total').map((s) => [s.labels, s.value])).toEqual([
      [['engine', 'pay', 'executed'], 5],
      [['http', 'pay', 'executed'], 1],
    ]);
    expect(m.read('oncely_outbox_total')).toEqual([]);
    // Counters carry no buckets.
    expect(m.read('oncely_key_hits_total')[0]?.buckets).toBeUndefined();
  });

  it('keeps label values apart: a series is its whole label list, not a prefix of it', () => {
    const m = new Metrics();
    m.add('oncely_outbox_total', ['orders', 'delivered']);
    m.add('oncely_outbox_total', ['orders.delivered', '']);
    expect(m.value('oncely_outbox_total', ['orders', 'delivered'])).toBe(1);
    expect(m.value('oncely_outbox_total', ['orders.delivered', ''])).toBe(1);
    expect(m.read('oncely_outbox_total')).toHaveLength(2);
  });

  it('hands out live series: what a hot path adds to one is what is read, across reset', () => {
    const m = new Metrics();
    const kept = m.series('oncely_calls_total', ['engine', 'pay', 'executed']);
    expect(m.series('oncely_calls_total', ['engine', 'pay', 'executed'])).toBe(kept);
    kept.value += 3;
    expect(m.value('oncely_calls_total', ['engine', 'pay', 'executed'])).toBe(3);
    const histogram = m.series('oncely_replay_seconds', ['engine', 'pay']);
    observeInto(histogram, 0.002);
    m.reset();
    expect(m.value('oncely_calls_total', ['engine', 'pay', 'executed'])).toBe(0);
    expect(histogram).toMatchObject({ value: 0, sum: 0 });
    expect(histogram.buckets?.every((b) => b === 0)).toBe(true);
    kept.value += 1;
    expect(m.value('oncely_calls_total', ['engine', 'pay', 'executed'])).toBe(1);
    expect(m.read('oncely_calls_total')).toEqual([{ labels: ['engine', 'pay', 'executed'], value: 1, sum: 0 }]);
  });

  it('puts each duration in the first bucket whose bound holds it, the rest in +Inf; buckets are not cumulative', () => {
    const m = new Metrics();
    const labels = ['engine', 'pay'];
    for (const seconds of [0, 0.0001, 0.00011, 0.003, 0.003, 30, 31, 1e6])
      m.observe('oncely_execution_seconds', labels, seconds);
    const [series] = m.read('oncely_execution_seconds');
    expect(series?.buckets).toHaveLength(DURATION_BUCKETS.length + 1);
    const expected = new Array<number>(DURATION_BUCKETS.length + 1).fill(0);
    expected[0] = 2; // 0 and 0.0001: a bound is inclusive (Prometheus's le)
    expected[1] = 1; // 0.00011 <= 0.00025
    expected[DURATION_BUCKETS.indexOf(0.005)] = 2;
    expected[DURATION_BUCKETS.indexOf(30)] = 1;
    expected[DURATION_BUCKETS.length] = 2; // over the last bound
    expect(series?.buckets).toEqual(expected);
    expect(series?.value).toBe(8);
    expect(series?.sum).toBeCloseTo(0 + 0.0001 + 0.00011 + 0.006 + 30 + 31 + 1e6, 9);
  });

  it('sums a counter over the series its filter matches, and refuses a label the metric lacks', () => {
    const m = new Metrics();
    m.add('oncely_calls_total', ['engine', 'pay', 'executed'], 2);
    m.add('oncely_calls_total', ['engine', 'pay', 'replayed'], 3);
    m.add('oncely_calls_total', ['http', 'pay', 'replayed'], 4);
    m.add('oncely_calls_total', ['http', 'book', 'executed'], 1);
    expect(m.sum('oncely_calls_total')).toBe(10);
    expect(m.sum('oncely_calls_total', { surface: 'http' })).toBe(5);
    expect(m.sum('oncely_calls_total', { action: 'pay', outcome: 'replayed' })).toBe(7);
    expect(m.sum('oncely_calls_total', { surface: 'engine', action: 'book' })).toBe(0);
    expect(m.sum('oncely_calls_total', { outcome: 'unknown' })).toBe(0);
    expect(m.sum('oncely_takeovers_total')).toBe(0);
    expect(() => m.sum('oncely_calls_total', { outcomes: 'replayed' })).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    );
  });

  it('counts nothing when disabled', () => {
    const m = new Metrics(false);
    expect(m.enabled).toBe(false);
    m.add('oncely_calls_total', ['engine', 'pay', 'executed'], 5);
    m.observe('oncely_replay_seconds', ['engine', 'pay'], 0.001);
    expect(m.read('oncely_calls_total')).toEqual([]);
    expect(m.read('oncely_replay_seconds')).toEqual([]);
    expect(m.value('oncely_calls_total', ['engine', 'pay', 'executed'])).toBe(0);
    expect(m.sum('oncely_calls_total')).toBe(0);
    expect(new Metrics().enabled).toBe(true);
  });

  it('names metrics as Prometheus does, with bounded label names (never a tenant, key or id)', () => {
    for (const [name, spec] of Object.entries(METRICS)) {
      expect(name).toMatch(/^oncely_[a-z_]+$/);
      if (spec.type === 'counter') expect(name).toMatch(/_total$/);
      if (spec.type === 'histogram') expect(name).toMatch(/_seconds$/);
      for (const label of spec.labels as readonly string[]) expect(['tenant', 'key', 'id', 'le']).not.toContain(label);
    }
  });
});

describe('the four rates', () => {
  it('are NaN before anything was counted, never a made-up 0 or 1', () => {
    const r = rates(NONE);
    expect(r.duplicateInterception).toBeNaN();
    expect(r.keyHit).toBeNaN();
    expect(r.staleDrop).toBeNaN();
    expect(r.compensationSuccess).toBeNaN();
  });

  it('divide each numerator by its own denominator', () => {
    expect(
      rates({
        ...NONE,
        duplicatesIntercepted: 999,
        duplicates: 1000,
        keyHits: 0,
        calls: 7,
        staleEvents: 3,
        orderedEvents: 3,
        compensationsSucceeded: 1,
        compensations: 4,
      }),
    ).toEqual({ duplicateInterception: 0.999, keyHit: 0, staleDrop: 1, compensationSuccess: 0.25 });
    // Calls but no duplicate yet: the key hit rate is known, the interception rate is not.
    const some = rates({ ...NONE, keyHits: 0, calls: 5 });
    expect(some.keyHit).toBe(0);
    expect(some.duplicateInterception).toBeNaN();
    expect(RATE_TARGETS).toEqual({ duplicateInterception: 0.999, compensationSuccess: 1 });
  });

  it('read their totals from the metrics of every surface', () => {
    const m = new Metrics();
    m.add('oncely_calls_total', ['engine', 'pay', 'executed'], 2);
    m.add('oncely_calls_total', ['http', 'pay', 'replayed'], 6);
    m.add('oncely_key_hits_total', ['http', 'pay'], 6);
    m.add('oncely_duplicates_total', ['http', 'pay', 'true'], 6);
    m.add('oncely_duplicates_total', ['engine', 'pay', 'false'], 2);
    m.add('oncely_events_total', ['stripe', 'invoice.paid', 'stale'], 1);
    m.add('oncely_events_total', ['stripe', 'invoice.paid', 'applied'], 3);
    m.add('oncely_events_ordered_total', ['stripe', 'invoice.paid'], 4);
    m.add('oncely_compensations_total', ['flow', 'checkout', 'succeeded'], 3);
    m.add('oncely_compensations_total', ['flow', 'checkout', 'failed'], 1);
    const totals = rateTotals(m);
    expect(totals).toEqual({
      duplicatesIntercepted: 6,
      duplicates: 8,
      keyHits: 6,
      calls: 8,
      staleEvents: 1,
      orderedEvents: 4,
      compensationsSucceeded: 3,
      compensations: 4,
    });
    expect(rates(totals)).toEqual({
      duplicateInterception: 0.75,
      keyHit: 0.75,
      staleDrop: 0.25,
      compensationSuccess: 0.75,
    });
  });
  it('review3.12: count intake duplicates, flow starts that found their run, stale versioned writes and credit give-backs', () => {
    const m = new Metrics();
    m.add('oncely_duplicates_total', ['webhook', 'stripe/invoice.paid', 'true'], 2);
    m.add('oncely_duplicates_total', ['broker', 'orders/(other)', 'true'], 3);
    m.add('oncely_duplicates_total', ['flow_start', 'checkout', 'true'], 1);
    m.add('oncely_duplicates_total', ['consumer', 'consume:stripe/invoice.paid', 'false'], 1);
    m.add('oncely_versions_total', ['orders', 'applied'], 3);
    m.add('oncely_versions_total', ['orders', 'stale'], 1);
    m.add('oncely_events_total', ['stripe', 'invoice.paid', 'stale'], 1);
    m.add('oncely_events_ordered_total', ['stripe', 'invoice.paid'], 4);
    m.add('oncely_compensations_total', ['tool', 'send_sms', 'succeeded'], 1);
    m.add('oncely_compensations_total', ['flow', 'checkout', 'failed'], 1);
    expect(rateTotals(m)).toMatchObject({
      duplicatesIntercepted: 6,
      duplicates: 7,
      staleEvents: 2,
      orderedEvents: 8,
      compensationsSucceeded: 1,
      compensations: 2,
    });
  });
});
