/**
 * The seam between a broker client and oncely: a source hands over messages and is told when to
 * acknowledge each; a target publishes outbox rows and resolves only once the broker confirmed.
 * One file per broker implements these (`nats.ts`, `rabbitmq.ts`, `redis-streams.ts`); the inbox
 * (`inbox.ts`) and the host drive any of them the same way.
 */
import type { OutboxMessage } from '../host/outbox.js';

/** One message a broker delivered, as its source hands it to the inbox. */
export interface BrokerMessage {
  /** The event id, from where the source's config says (a header, the message id, a body field); undefined when absent. */
  readonly id: string | undefined;
  /** The event type the consumers are bound by (a header, the subject or routing key, a field). */
  readonly type: string;
  /** The decoded body. */
  readonly data: unknown;
  /** The intent's trace id its sender named (`Oncely-Trace-Id`, else a `traceparent`); its consumer runs under it. */
  readonly traceId?: string;
  /** Why the source could not read it (a body over `maxBodyBytes`, or not JSON): the inbox rejects it. */
  readonly refusal?: string;
  /** Acknowledges: the event row is committed, or it was a duplicate. */
  ack(): Promise<void>;
  /** Gives the message back for redelivery (the intake failed: the database is down). */
  retry(): Promise<void>;
  /** Refuses it for good, to the broker's own dead-letter mechanism (no id, a body it cannot take, one the database refuses). */
  reject(reason: string): Promise<void>;
  /** Pushes the broker's redelivery deadline back while the intake still runs (JetStream `working()`). */
  working?(): void;
}

/** Where a source's connection is. */
export type SourceState = 'connecting' | 'connected' | 'reconnecting' | 'stopped';

/** What `oncely serve` reports of each source. */
export interface SourceStatus {
  state: SourceState;
  /** Messages the broker holds for this consumer and has not delivered, where the broker tells it. */
  lag?: number;
  /** The last connection error, while not connected. */
  lastError?: string;
}

/** A broker consumer feeding the inbox. It reconnects by itself, with backoff, until stopped. */
export interface BrokerSource {
  /** The event source name the inbox stores its messages under (dedupe is per source and id). */
  readonly name: string;
  /**
   * Starts consuming: `handle` gets batches of at most `capacity` messages in flight and resolves once
   * each of them was acked, retried or rejected. A source takes no more until capacity frees.
   */
  start(handle: (batch: BrokerMessage[]) => Promise<void>): Promise<void>;
  /** Stops taking messages, waits for the batch in flight, closes the connection. */
  stop(): Promise<void>;
  status(): SourceStatus;
}

/** An outbox target on a broker: `deliver` resolves only after the broker confirmed the message. */
export interface BrokerTarget {
  deliver(message: OutboxMessage): Promise<void>;
  close(): Promise<void>;
  status(): SourceStatus;
}
