/** What a group commit needs of a SQLite connection; a better-sqlite3 Database fits. */
export interface CommitConnection {
  exec(sql: string): unknown;
  readonly inTransaction: boolean;
}

interface Pending {
  apply(): unknown;
  resolve(value: unknown): void;
  reject(error: unknown): void;
}

/**
 * SQLite group commit: writes queued in one turn of the event loop run in one transaction, so a
 * burst pays one fsync instead of one per statement; each caller gets its own result or error.
 * Used by the record store and by the Db seam's writes outside a transaction.
 */
export class GroupCommit {
  private queue: Pending[] = [];
  private scheduled = false;

  /**
   * `turn` runs the commit when the connection is free: the Db seam passes its queue, so a
   * commit never interleaves with a transaction another caller has open on the same connection.
   */
  constructor(
    private readonly db: CommitConnection,
    private readonly turn: (commit: () => void) => void = (commit) => commit(),
  ) {}

  /** Queues `apply` (synchronous statements) for the next commit; resolves with what it returns. */
  push<R>(apply: () => R): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.queue.push({ apply, resolve: resolve as (value: unknown) => void, reject });
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => this.turn(() => this.flush()));
      }
    });
  }

  /** Commits every queued write now, in one transaction (BEGIN IMMEDIATE takes the write lock at once). */
  flush(): void {
    this.scheduled = false;
    const batch = this.queue;
    if (batch.length === 0) return;
    this.queue = [];
    const results: { ok: boolean; value: unknown }[] = [];
    try {
      this.db.exec('BEGIN IMMEDIATE');
      for (const item of batch) {
        try {
          results.push({ ok: true, value: item.apply() });
        } catch (error) {
          results.push({ ok: false, value: error });
        }
      }
      this.db.exec('COMMIT');
    } catch (error) {
      if (this.db.inTransaction) this.db.exec('ROLLBACK');
      for (const item of batch) item.reject(error);
      return;
    }
    batch.forEach((item, i) => {
      const result = results[i];
      if (result?.ok) item.resolve(result.value);
      else item.reject(result?.value);
    });
  }
}
