import { validateKey } from '../core/key.js';
import type { Db, Sql } from '../db/types.js';

/** Where the relay hands a message: the app's own consumers, or later a broker. */
export interface OutboxTarget {
  /** Delivers one message; may be called again for the same id (at least once), so the target dedupes on it. */
  deliver(message: OutboxMessage): Promise<void>;
}

/** A row of the outbox. */
export interface OutboxMessage {
  id: string;
  topic: string;
  payload: unknown;
  createdAt: number;
}

/** The outbox table. */
export const OUTBOX_DDL = `CREATE TABLE IF NOT EXISTS oncely_outbox (
  id TEXT PRIMARY KEY,
  topic TEXT NOT NULL,
  payload TEXT NOT NULL,
  status TEXT NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  next_attempt_at BIGINT NOT NULL,
  lease_until BIGINT,
  last_error TEXT,
  created_at BIGINT NOT NULL,
  delivered_at BIGINT
)`;

/** Writes a message in the caller's transaction; an id already written is not written again. */
export async function enqueue(
  tx: Sql,
  id: string,
  topic: string,
  payload: unknown,
): Promise<{ id: string; created: boolean }> {
  validateKey(id);
  const now = Date.now();
  const created = await tx.run(
    `INSERT INTO oncely_outbox (id, topic, payload, status, next_attempt_at, created_at)
     VALUES (?, ?, ?, 'pending', ?, ?) ON CONFLICT (id) DO NOTHING`,
    [id, topic, JSON.stringify(payload ?? null), now, now],
  );
  return { id, created: created === 1 };
}

/** Options of the relay. */
export interface RelayOptions {
  target: OutboxTarget;
  pollMs?: number;
  batchSize?: number;
  leaseMs?: number;
  baseDelayMs?: number;
  maxDelayMs?: number;
}

/**
 * Delivers committed outbox rows at least once: claims due rows with a lease (a relay that died
 * loses them after it), hands each to the target, then marks it delivered.
 */
export class OutboxRelay {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = true;

  constructor(
    private readonly db: Db,
    private readonly options: RelayOptions,
  ) {}

  /** Starts polling. */
  start(): void {
    this.stopped = false;
    this.schedule(0);
  }

  /** Wakes the relay now (after a commit that enqueued). */
  wake(): void {
    if (!this.stopped && !this.running) this.schedule(0);
  }

  /** Stops polling and waits for the round in flight. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
  }

  /** Delivers everything due now; returns how many were delivered. */
  async deliverDue(): Promise<number> {
    const { batchSize = 32, leaseMs = 30_000 } = this.options;
    const now = Date.now();
    const claimed = await this.db.transaction(async (tx) => {
      const lock = tx.dialect === 'postgres' ? ' FOR UPDATE SKIP LOCKED' : '';
      const rows = await tx.all<{
        id: string;
        topic: string;
        payload: string;
        created_at: number | string;
        attempts: number;
      }>(
        `SELECT id, topic, payload, created_at, attempts FROM oncely_outbox
         WHERE (status = 'pending' AND next_attempt_at <= ?) OR (status = 'delivering' AND lease_until <= ?)
         ORDER BY created_at, id LIMIT ?${lock}`,
        [now, now, batchSize],
      );
      for (const row of rows)
        await tx.run(
          `UPDATE oncely_outbox SET status = 'delivering', lease_until = ?, attempts = attempts + 1 WHERE id = ?`,
          [now + leaseMs, row.id],
        );
      return rows;
    });
    for (const row of claimed) {
      const message = {
        id: row.id,
        topic: row.topic,
        payload: JSON.parse(row.payload) as unknown,
        createdAt: Number(row.created_at),
      };
      try {
        await this.options.target.deliver(message);
        await this.db.run(
          `UPDATE oncely_outbox SET status = 'delivered', delivered_at = ?, lease_until = NULL WHERE id = ?`,
          [Date.now(), row.id],
        );
      } catch (error) {
        const { baseDelayMs = 500, maxDelayMs = 60_000 } = this.options;
        const delay = Math.random() * Math.min(maxDelayMs, baseDelayMs * 2 ** Math.min(row.attempts, 20));
        await this.db.run(
          `UPDATE oncely_outbox SET status = 'pending', next_attempt_at = ?, lease_until = NULL, last_error = ? WHERE id = ?`,
          [Date.now() + delay, error instanceof Error ? error.message : String(error), row.id],
        );
      }
    }
    return claimed.length;
  }

  private schedule(ms: number): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.running = this.round().finally(() => {
        this.running = undefined;
      });
    }, ms);
    this.timer.unref();
  }

  private async round(): Promise<void> {
    let delivered = 0;
    try {
      delivered = await this.deliverDue();
    } catch {
      // The database is unreachable for now; the next round tries again.
    }
    if (!this.stopped) this.schedule(delivered > 0 ? 0 : (this.options.pollMs ?? 250));
  }
}
