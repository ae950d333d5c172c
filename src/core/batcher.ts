/**
 * Runs a batch of items as one statement; answers are in item order. An answer that is an Error
 * fails its own caller only (a record the statement could not handle), the rest of the batch not.
 */
export type RunBatch<I, O> = (items: I[]) => Promise<(O | Error)[]>;

interface Waiting<I, O> {
  item: I;
  resolve: (value: O) => void;
  reject: (error: unknown) => void;
}

/** How a batcher sizes its statements. */
export interface BatcherOptions<I> {
  /** Most items in one statement. */
  maxBatch?: number;
  /** Statements in flight at once; callers arriving meanwhile wait for the next one. */
  maxInFlight?: number;
  /** When a failed batch should be retried item by item, so one bad item fails only its caller. */
  isolate?: (error: unknown) => boolean;
  /** When given, a batch holds one item per key; later ones with that key wait for the next batch, in order. */
  distinct?: (item: I) => string;
  /**
   * When an idle batcher sends: 'microtask' (the default) catches the callers of the same tick;
   * 'auto' gathers on a microtask and waits for the end of the event loop's turn (setImmediate)
   * only when that caught less than half a batch (a batch that fills meanwhile goes at once): a
   * wave of callers resumed by one answer (a closed loop) goes out at once, while other answers are
   * still being handled, and callers arriving one socket callback at a time (HTTP requests) still
   * share a statement.
   */
  gather?: 'microtask' | 'auto';
}

/**
 * Coalesces concurrent calls into batches. Idle, a call is sent at once (after the current
 * microtask, to catch callers of the same tick, or at the end of the loop's turn, see `gather`),
 * so a lone caller waits for no timer; while `maxInFlight` statements are in flight, calls
 * accumulate and go together when one returns.
 */
export class Batcher<I, O> {
  private queue: Waiting<I, O>[] = [];
  private inFlight = 0;
  private scheduled = false;
  // 'auto' only: the few callers a microtask caught wait for the end of the turn.
  private waitingTurn = false;
  private readonly maxBatch: number;
  private readonly maxInFlight: number;
  private readonly isolate: (error: unknown) => boolean;
  private readonly distinct: ((item: I) => string) | undefined;
  private readonly gather: 'microtask' | 'auto';

  /** Creates a batcher around `run`. */
  constructor(
    private readonly run: RunBatch<I, O>,
    { maxBatch = 500, maxInFlight = 1, isolate = () => false, distinct, gather = 'microtask' }: BatcherOptions<I> = {},
  ) {
    this.distinct = distinct;
    this.gather = gather;
    this.maxBatch = maxBatch;
    this.maxInFlight = maxInFlight;
    this.isolate = isolate;
  }

  /** Queues one item; resolves with its own answer. */
  push(item: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      // Waiting for the turn's end fills no more than a full batch: each goes once full.
      if (this.waitingTurn && this.queue.length === this.maxBatch) queueMicrotask(() => this.pump());
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled || this.inFlight >= this.maxInFlight) return;
    this.scheduled = true;
    const send = () => {
      this.scheduled = false;
      this.waitingTurn = false;
      this.pump();
    };
    if (this.gather === 'microtask') queueMicrotask(send);
    else
      queueMicrotask(() => {
        if (this.queue.length * 2 >= this.maxBatch) return send();
        this.waitingTurn = true;
        setImmediate(send);
      });
  }

  private pump(): void {
    while (this.inFlight < this.maxInFlight && this.queue.length > 0) {
      const batch = this.take();
      this.inFlight++;
      void this.send(batch).finally(() => {
        this.inFlight--;
        this.pump();
      });
    }
  }

  private take(): Waiting<I, O>[] {
    if (!this.distinct) return this.queue.splice(0, this.maxBatch);
    const batch: Waiting<I, O>[] = [];
    const keys = new Set<string>();
    const waiting: Waiting<I, O>[] = [];
    for (const entry of this.queue) {
      const key = this.distinct(entry.item);
      if (batch.length < this.maxBatch && !keys.has(key)) batch.push(entry);
      else waiting.push(entry);
      keys.add(key);
    }
    this.queue = waiting;
    return batch;
  }

  private async send(batch: Waiting<I, O>[]): Promise<void> {
    try {
      const answers = await this.run(batch.map((w) => w.item));
      if (answers.length !== batch.length)
        throw new Error(`batch returned ${answers.length} answers for ${batch.length}`);
      for (let i = 0; i < batch.length; i++) {
        const answer = answers[i];
        if (answer instanceof Error) (batch[i] as Waiting<I, O>).reject(answer);
        else (batch[i] as Waiting<I, O>).resolve(answer as O);
      }
    } catch (error) {
      if (batch.length > 1 && this.isolate(error)) {
        await Promise.all(batch.map((w) => this.send([w])));
        return;
      }
      for (const w of batch) w.reject(error);
    }
  }
}
