/**
 * Hands a source's messages to the inbox in batches: one batch at a time, while the next one
 * gathers, and never more than `capacity` messages unsettled (handed or waiting, not yet acked,
 * retried or rejected). A source asks `room()` before it takes more from its broker.
 */
import type { BrokerMessage } from './types.js';

/** Batches of a source's messages within its capacity; each message's settlement frees its slot. */
export class Feed {
  private pending: BrokerMessage[] = [];
  private unsettled = 0;
  private running: Promise<void> | undefined;
  private closed = false;
  private roomWaiters: (() => void)[] = [];
  // While a small batch waits for its tick, and while that tick hands it over.
  private lingering = false;
  private lingered = false;

  constructor(
    private readonly handle: (batch: BrokerMessage[]) => Promise<void>,
    /** Most messages unsettled at once. */
    readonly capacity: number,
  ) {}

  /** How many more messages the source may take now. */
  room(): number {
    return Math.max(0, this.capacity - this.unsettled);
  }

  /** Resolves once room() > 0 (at once if it is), or when the feed closes. */
  whenRoom(): Promise<void> {
    if (this.room() > 0 || this.closed) return Promise.resolve();
    return new Promise((resolve) => this.roomWaiters.push(resolve));
  }

  /** Queues messages for the next batch. */
  push(messages: readonly BrokerMessage[]): void {
    if (this.closed) return;
    for (const message of messages) this.pending.push(this.track(message));
    this.pump();
  }

  /**
   * Stops handing batches and waits for the one in flight. Messages still waiting are dropped
   * unsettled: the broker redelivers them (a closed channel, a pending entry claimed later).
   */
  async close(): Promise<void> {
    this.closed = true;
    this.pending = [];
    for (const wake of this.roomWaiters.splice(0)) wake();
    await this.running;
  }

  private pump(): void {
    if (this.running || this.pending.length === 0 || this.closed || this.lingering) return;
    // A batch under half the capacity first waits one timer tick (about 1 ms) for more: the broker
    // refills what the last acks freed over a few reads, and a batch of a few messages costs a whole
    // transaction (a commit, on SQLite an fsync) as a full one does.
    if (this.pending.length < Math.ceil(this.capacity / 2) && !this.lingered) {
      this.lingering = true;
      setTimeout(() => {
        this.lingering = false;
        this.lingered = true;
        this.pump();
        this.lingered = false;
      }, 1);
      return;
    }
    // At most half the capacity: while one batch is stored, the broker has room to deliver the
    // next one in full. Without the cap, sizes alternate (1, 63, 1, 63 at capacity 64), and every
    // batch of one costs a whole transaction.
    const batch = this.pending.splice(0, Math.ceil(this.capacity / 2));
    this.running = this.run(batch).finally(() => {
      this.running = undefined;
      this.pump();
    });
  }

  private async run(batch: BrokerMessage[]): Promise<void> {
    try {
      await this.handle(batch);
    } catch {
      // The inbox settles each message itself; a handler that threw leaves some unsettled, below.
    }
    // A message the handler neither acked, retried nor rejected would hold its slot for ever.
    await Promise.allSettled(batch.filter((m) => !(m as Tracked).settled).map((m) => m.retry()));
  }

  private track(message: BrokerMessage): BrokerMessage {
    this.unsettled++;
    const settle =
      <A extends unknown[]>(op: (...args: A) => Promise<void>) =>
      (...args: A): Promise<void> => {
        if (!tracked.settled) {
          tracked.settled = true;
          this.unsettled--;
          for (const wake of this.roomWaiters.splice(0)) wake();
        }
        return op(...args);
      };
    const tracked: Tracked = {
      id: message.id,
      type: message.type,
      data: message.data,
      traceId: message.traceId,
      ...(message.refusal !== undefined ? { refusal: message.refusal } : {}),
      settled: false,
      ack: settle(() => message.ack()),
      retry: settle(() => message.retry()),
      reject: settle((reason: string) => message.reject(reason)),
      ...(message.working ? { working: () => message.working?.() } : {}),
    };
    return tracked;
  }
}

interface Tracked extends BrokerMessage {
  settled: boolean;
}
