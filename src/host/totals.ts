/**
 * The host's totals: every counter of METRICS summed in its database, so the four rates are the
 * same whichever process answers and after a restart. A count with a transaction of its own (an
 * event's intake or processing, an outbox delivery) is written in it; the rest (engine calls,
 * flows) is flushed from the process's metrics every second and at stop. Each count is written
 * once: what a transaction wrote is marked as accounted, and a flush writes only the difference.
 */
import { type CounterName, METRICS, type MetricName, Metrics, type RateTotals, rateTotals } from '../core/metrics.js';
import type { Db, Sql } from '../db/types.js';

/** Counts one increment inside a transaction (written now, added to the process's metrics on commit). */
export type Count = (name: CounterName, labels: readonly string[], n?: number) => Promise<void>;

/** One summed series as `GET /v1/stats` answers it. */
export interface TotalSeries {
  labels: Record<string, string>;
  value: number;
}

// Spreads PostgreSQL's increments over rows, so concurrent transactions do not queue on one row lock.
const SHARDS = 16;
// Series per flush statement: bounded, however many actions and topics a process counted.
const FLUSH_BATCH = 100;
const FLUSH_MS = 1000;

const COUNTERS = (Object.keys(METRICS) as MetricName[]).filter(
  (name): name is CounterName => METRICS[name].type === 'counter',
);

/** The totals table, created by the events component (whose sharded counters it replaces). */
export function totalsTable(dialect: 'sqlite' | 'postgres'): string {
  return `CREATE TABLE IF NOT EXISTS oncely_totals (
    metric TEXT NOT NULL,
    labels TEXT NOT NULL,
    shard INTEGER NOT NULL,
    value ${dialect === 'postgres' ? 'BIGINT' : 'INTEGER'} NOT NULL,
    PRIMARY KEY (metric, labels, shard)
  )`;
}

const UPSERT_TAIL = 'ON CONFLICT (metric, labels, shard) DO UPDATE SET value = oncely_totals.value + excluded.value';

/** Sums counters in the database beside the process's own metrics, and reads them back. */
export class Totals {
  /** What is in the database already of `metrics`: written by a transaction, or flushed. */
  private readonly accounted = new Metrics();
  private flushing: Promise<void> = Promise.resolve();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly db: Db,
    /** This process's metrics: what a flush writes the new part of. */
    readonly metrics: Metrics,
    private readonly onError: (error: unknown) => void = (error) => console.error('oncely totals:', error),
  ) {}

  /**
   * Runs `fn` in a transaction of the database with `count` writing into it; the counts reach the
   * process's metrics only once it commits.
   */
  async transaction<T>(fn: (tx: Sql, count: Count) => Promise<T>): Promise<T> {
    const pending: [CounterName, readonly string[], number][] = [];
    const result = await this.db.transaction((tx) => fn(tx, this.counter(tx, pending)));
    this.committed(pending);
    return result;
  }

  /**
   * Counts in a caller's transaction (`tx`), whose commit is the caller's: the process's metrics
   * are counted at once.
   */
  async countIn(tx: Sql, name: CounterName, labels: readonly string[], n = 1): Promise<void> {
    const pending: [CounterName, readonly string[], number][] = [];
    await this.counter(tx, pending)(name, labels, n);
    this.committed(pending);
  }

  /** Flushes every second until stop(). */
  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => void this.flush().catch(this.onError), FLUSH_MS);
    this.timer.unref();
  }

  /** Stops the timer and flushes what is left. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.flush();
  }

  /** Writes what the process counted since the last flush and no transaction wrote; one flush at a time. */
  flush(): Promise<void> {
    const next = this.flushing.then(() => this.write());
    // A failed flush leaves its deltas unaccounted: the next one writes them.
    this.flushing = next.catch(() => undefined);
    return next;
  }

  /** Every counter's total series (labels by name), as summed over shards and processes. */
  async read(): Promise<Record<string, TotalSeries[]>> {
    const totals: Record<string, TotalSeries[]> = {};
    for (const { name, labels, value } of await this.rows()) {
      const names = METRICS[name].labels as readonly string[];
      const series = totals[name] ?? [];
      series.push({ labels: Object.fromEntries(names.map((l, i) => [l, labels[i] ?? ''])), value });
      totals[name] = series;
    }
    return totals;
  }

  /** The totals the four rates are computed from, one definition with the process's: rateTotals. */
  async rateTotals(): Promise<RateTotals> {
    const summed = new Metrics();
    for (const { name, labels, value } of await this.rows()) summed.add(name, labels, value);
    return rateTotals(summed);
  }

  /** One counter's totals by the value of one of its labels. */
  async by(name: CounterName, label: string): Promise<Record<string, number>> {
    const at = (METRICS[name].labels as readonly string[]).indexOf(label);
    const sums: Record<string, number> = {};
    for (const row of await this.rows(name)) {
      const value = row.labels[at] ?? '';
      sums[value] = (sums[value] ?? 0) + row.value;
    }
    return sums;
  }

  private async rows(only?: CounterName): Promise<{ name: CounterName; labels: string[]; value: number }[]> {
    const rows = await this.db.all<{ metric: string; labels: string; value: number | string }>(
      `SELECT metric, labels, SUM(value) AS value FROM oncely_totals${only ? ' WHERE metric = ?' : ''}
       GROUP BY metric, labels ORDER BY metric, labels`,
      only ? [only] : [],
    );
    // A metric this release does not know (a newer one wrote it) is left out.
    return rows
      .filter((r) => (COUNTERS as readonly string[]).includes(r.metric))
      .map((r) => ({
        name: r.metric as CounterName,
        labels: JSON.parse(r.labels) as string[],
        value: Number(r.value),
      }));
  }

  private counter(tx: Sql, pending: [CounterName, readonly string[], number][]): Count {
    return async (name, labels, n = 1) => {
      await tx.run(`INSERT INTO oncely_totals (metric, labels, shard, value) VALUES (?, ?, ?, ?) ${UPSERT_TAIL}`, [
        name,
        JSON.stringify(labels),
        shardOf(tx),
        n,
      ]);
      pending.push([name, labels, n]);
    };
  }

  // Synchronous: no flush can run between the metric's count and its accounting.
  private committed(pending: readonly [CounterName, readonly string[], number][]): void {
    for (const [name, labels, n] of pending) {
      this.metrics.add(name, labels, n);
      this.accounted.add(name, labels, n);
    }
  }

  private async write(): Promise<void> {
    const deltas: [CounterName, readonly string[], number][] = [];
    for (const name of COUNTERS)
      for (const series of this.metrics.read(name)) {
        const delta = series.value - this.accounted.value(name, series.labels);
        if (delta > 0) deltas.push([name, [...series.labels], delta]);
      }
    for (let i = 0; i < deltas.length; i += FLUSH_BATCH) {
      const batch = deltas.slice(i, i + FLUSH_BATCH);
      const shard = shardOf(this.db);
      await this.db.run(
        `INSERT INTO oncely_totals (metric, labels, shard, value) VALUES ${batch.map(() => '(?, ?, ?, ?)').join(', ')} ${UPSERT_TAIL}`,
        batch.flatMap(([name, labels, n]) => [name, JSON.stringify(labels), shard, n]),
      );
      for (const [name, labels, n] of batch) this.accounted.add(name, labels, n);
    }
  }
}

function shardOf(sql: Sql): number {
  return sql.dialect === 'postgres' ? Math.floor(Math.random() * SHARDS) : 0;
}
