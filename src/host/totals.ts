/**
 * The host's totals: every counter of METRICS summed in its database, so the four rates are the
 * same whichever process answers and after a restart. A count with a transaction of its own (an
 * event's intake or processing, an outbox delivery, a handler's or consumer's engine run) is
 * written in it; the rest (flows, refusals before a transaction) is flushed from the process's
 * metrics every second and at stop. Each count is written once: what is written, or being written
 * by a transaction not yet settled, is accounted, and every writer takes only the difference.
 */
import {
  CALL_OUTCOMES,
  type CounterName,
  METRICS,
  type MetricName,
  Metrics,
  type RateTotals,
  rateTotals,
  type Surface,
} from '../core/metrics.js';
import type { Db, Sql } from '../db/types.js';

/** Counts one increment inside a transaction (written now, added to the process's metrics on commit). */
export type Count = (name: CounterName, labels: readonly string[], n?: number) => Promise<void>;

type Delta = [CounterName, readonly string[], number];

/** One summed series as `GET /v1/stats` answers it. */
export interface TotalSeries {
  labels: Record<string, string>;
  value: number;
}

// On PostgreSQL every statement writes rows of its own shard, drawn from this many: no two
// transactions wait on (or deadlock over) a counter row, whatever order they count in. The
// compaction folds them into shard 0, which only it writes.
const SHARDS = 2 ** 31 - 1;
// Rows one compaction statement folds: bounded, however far behind it is.
const COMPACT_BATCH = 5_000;
// Series per flush statement: bounded, however many actions and topics a process counted.
const FLUSH_BATCH = 100;
const FLUSH_MS = 1000;

const COUNTERS = (Object.keys(METRICS) as MetricName[]).filter(
  (name): name is CounterName => METRICS[name].type === 'counter',
);

/** The series the engine counts a call of (surface, action) in, each looked up by its labels. */
function engineSeries(surface: Surface, action: string): [CounterName, readonly string[]][] {
  return [
    ...CALL_OUTCOMES.map((outcome): [CounterName, readonly string[]] => [
      'oncely_calls_total',
      [surface, action, outcome],
    ]),
    ['oncely_key_hits_total', [surface, action]],
    ['oncely_duplicates_total', [surface, action, 'true']],
    ['oncely_duplicates_total', [surface, action, 'false']],
    ['oncely_takeovers_total', [surface, action]],
  ];
}

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

/** The counts of one transaction: written in it, and settled in the process's metrics when it ends. */
export class TxCounts {
  private readonly counted: Delta[] = [];
  private readonly taken: Delta[] = [];

  constructor(
    private readonly tx: Sql,
    private readonly accounted: Metrics,
    private readonly metrics: Metrics,
  ) {}

  /** Counts `n` of one series in the transaction; the process's metrics get it once it commits. */
  readonly count: Count = async (name, labels, n = 1) => {
    await upsert(this.tx, [[name, labels, n]]);
    this.counted.push([name, labels, n]);
  };

  /**
   * Writes in the transaction what the engine counted for (surface, action) and nobody wrote yet:
   * the run that just ended inside it (and any other of the action not yet written).
   */
  async engine(surface: Surface, action: string): Promise<void> {
    const taken = take(this.metrics, this.accounted, engineSeries(surface, action));
    this.taken.push(...taken);
    if (taken.length > 0) await upsert(this.tx, taken);
  }

  /** The transaction committed. Synchronous: no flush runs between a metric's count and its accounting. */
  committed(): void {
    for (const [name, labels, n] of this.counted) {
      this.metrics.add(name, labels, n);
      this.accounted.add(name, labels, n);
    }
  }

  /** The transaction rolled back: what it took is for a later writer. */
  rolledBack(): void {
    for (const [name, labels, n] of this.taken) this.accounted.add(name, labels, -n);
  }
}

/** Sums counters in the database beside the process's own metrics, and reads them back. */
export class Totals {
  /** What is in the database of `metrics`, or being written by a transaction not yet settled. */
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
  async transaction<T>(fn: (tx: Sql, counts: TxCounts) => Promise<T>): Promise<T> {
    let counts: TxCounts | undefined;
    try {
      const result = await this.db.transaction((tx) => {
        counts = new TxCounts(tx, this.accounted, this.metrics);
        return fn(tx, counts);
      });
      counts?.committed();
      return result;
    } catch (error) {
      counts?.rolledBack();
      throw error;
    }
  }

  /**
   * Counts in a caller's transaction (`tx`), whose commit is the caller's: the process's metrics
   * are counted at once.
   */
  async countIn(tx: Sql, name: CounterName, labels: readonly string[], n = 1): Promise<void> {
    const counts = new TxCounts(tx, this.accounted, this.metrics);
    await counts.count(name, labels, n);
    counts.committed();
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
    return byName(await this.rows());
  }

  /**
   * Every total series and the totals the four rates are computed from (one definition with the
   * process's: rateTotals), from one read of the table.
   */
  async summary(): Promise<{ totals: Record<string, TotalSeries[]>; rateTotals: RateTotals }> {
    const rows = await this.rows();
    const summed = new Metrics();
    for (const { name, labels, value } of rows) summed.add(name, labels, value);
    return { totals: byName(rows), rateTotals: rateTotals(summed) };
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

  private async write(): Promise<void> {
    const deltas = take(
      this.metrics,
      this.accounted,
      COUNTERS.flatMap((name) =>
        this.metrics.read(name).map((series): [CounterName, readonly string[]] => [name, series.labels]),
      ),
    );
    for (let i = 0; i < deltas.length; i += FLUSH_BATCH) {
      try {
        await upsert(this.db, deltas.slice(i, i + FLUSH_BATCH));
      } catch (error) {
        // What was not written is for the next flush.
        for (const [name, labels, n] of deltas.slice(i)) this.accounted.add(name, labels, -n);
        throw error;
      }
    }
    if (this.db.dialect === 'postgres') await compact(this.db);
  }
}

/** Summed rows as series by metric, their labels by name. */
function byName(
  rows: readonly { name: CounterName; labels: string[]; value: number }[],
): Record<string, TotalSeries[]> {
  const totals: Record<string, TotalSeries[]> = {};
  for (const { name, labels, value } of rows) {
    const names = METRICS[name].labels as readonly string[];
    const series = totals[name] ?? [];
    series.push({ labels: Object.fromEntries(names.map((l, i) => [l, labels[i] ?? ''])), value });
    totals[name] = series;
  }
  return totals;
}

/** The part of each series that nobody wrote or is writing, marked as being written. */
function take(metrics: Metrics, accounted: Metrics, series: readonly [CounterName, readonly string[]][]): Delta[] {
  const deltas: Delta[] = [];
  for (const [name, labels] of series) {
    const delta = metrics.value(name, labels) - accounted.value(name, labels);
    if (delta <= 0) continue;
    const copy = [...labels];
    accounted.add(name, copy, delta);
    deltas.push([name, copy, delta]);
  }
  return deltas;
}

/** Adds each delta to its series, on one shard, in one statement. */
async function upsert(sql: Sql, deltas: readonly Delta[]): Promise<void> {
  const shard = shardOf(sql);
  await sql.run(
    `INSERT INTO oncely_totals (metric, labels, shard, value) VALUES ${deltas.map(() => '(?, ?, ?, ?)').join(', ')} ${UPSERT_TAIL}`,
    deltas.flatMap(([name, labels, n]) => [name, JSON.stringify(labels), shard, n]),
  );
}

/** SQLite has one writer at a time, so one row per series; PostgreSQL gets a fresh shard per statement. */
function shardOf(sql: Sql): number {
  return sql.dialect === 'postgres' ? 1 + Math.floor(Math.random() * (SHARDS - 1)) : 0;
}

/**
 * Folds PostgreSQL's per-statement rows into shard 0, in bounded batches, in one process at a time
 * (an advisory lock of the schema's table; a process that does not get it leaves the work to the
 * holder). Readers sum every shard, and each batch moves rows in one transaction, so totals read
 * the same before, during and after.
 */
async function compact(db: Db): Promise<void> {
  for (;;) {
    const moved = await db.transaction(async (tx) => {
      const [lock] = await tx.all<{ locked: boolean }>(
        "SELECT pg_try_advisory_xact_lock(hashtext(current_schema() || '.oncely_totals')) AS locked",
      );
      if (!lock?.locked) return 0;
      const [row] = await tx.all<{ rows: number | string }>(
        `WITH moved AS (
           DELETE FROM oncely_totals WHERE ctid IN (SELECT ctid FROM oncely_totals WHERE shard <> 0 LIMIT ${COMPACT_BATCH})
           RETURNING metric, labels, value
         ), folded AS (
           INSERT INTO oncely_totals (metric, labels, shard, value)
           SELECT metric, labels, 0, SUM(value) FROM moved GROUP BY metric, labels
           ${UPSERT_TAIL}
         )
         SELECT COUNT(*) AS rows FROM moved`,
      );
      return Number(row?.rows ?? 0);
    });
    if (moved < COMPACT_BATCH) return;
  }
}
