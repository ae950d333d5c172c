/**
 * RabbitMQ: a queue as an inbox source (manual acks, prefetch = capacity) and an exchange as an
 * outbox target (persistent messages on a confirm channel). Needs the optional peer `amqplib`,
 * loaded when a source or target first connects.
 */
import type { Duration } from '../core/duration.js';
import { durationOption } from '../core/duration-option.js';
import { OncelyError } from '../core/errors.js';
import type { OncelyLogger } from '../core/observer.js';
import { loadPeer } from '../core/peer.js';
import type { OutboxMessage } from '../host/outbox.js';
import { type BodyOptions, bodyLimit, readBody } from './body.js';
import { Feed } from './feed.js';
import {
  ConnectionLife,
  keepConnected,
  Pause,
  type ReconnectDelays,
  type ReconnectOptions,
  reconnectDelays,
} from './reconnect.js';
import { TRACE_NAME, traceIdIn } from './trace.js';
import type { BrokerMessage, BrokerSource, BrokerTarget, SourceStatus } from './types.js';

// The few amqplib members used, declared here so its types stay out of the public declarations.
interface AmqpMessage {
  content: Buffer;
  fields: { routingKey: string; deliveryTag: number };
  properties: { messageId?: unknown; type?: unknown; headers?: Record<string, unknown> };
}
interface AmqpChannel {
  prefetch(count: number): Promise<unknown>;
  assertQueue(queue: string, options: Record<string, unknown>): Promise<{ messageCount: number }>;
  checkQueue(queue: string): Promise<{ messageCount: number }>;
  consume(
    queue: string,
    onMessage: (message: AmqpMessage | null) => void,
    options: { noAck: boolean },
  ): Promise<{ consumerTag: string }>;
  cancel(tag: string): Promise<unknown>;
  ack(message: AmqpMessage, allUpTo?: boolean): void;
  nack(message: AmqpMessage, allUpTo: boolean, requeue: boolean): void;
  publish(
    exchange: string,
    routingKey: string,
    content: Buffer,
    options: Record<string, unknown>,
    confirmed?: (error: unknown) => void,
  ): boolean;
  on(event: 'close' | 'error', listener: (error?: unknown) => void): unknown;
  on(event: 'return', listener: (message: AmqpMessage) => void): unknown;
  close(): Promise<void>;
}
interface AmqpConnection {
  createChannel(): Promise<AmqpChannel>;
  createConfirmChannel(): Promise<AmqpChannel>;
  on(event: 'close' | 'error', listener: (error?: unknown) => void): unknown;
  close(): Promise<void>;
}

async function connect(url: string, name: string): Promise<AmqpConnection> {
  const amqp = (await loadPeer(() => import('amqplib'), 'a RabbitMQ source or target', ['amqplib'])) as unknown as {
    connect(url: string, options: object): Promise<unknown>;
  };
  // connection_name is what `rabbitmqctl list_connections name client_properties` shows.
  return (await amqp.connect(url, { clientProperties: { connection_name: name } })) as AmqpConnection;
}

/** Where a RabbitMQ source reads a message's event id. */
export type RabbitIdFrom = 'message-id' | { header: string } | { field: string };
/** Where a RabbitMQ source reads a message's event type. */
export type RabbitTypeFrom = 'type' | 'routing-key' | { header: string };

/** A queue the source declares (assertQueue) instead of expecting it to exist. */
export interface RabbitQueueDeclaration {
  durable?: boolean;
  /** Where the queue dead-letters rejected messages (`x-dead-letter-exchange`). */
  deadLetterExchange?: string;
  deadLetterRoutingKey?: string;
  /** Further `x-` arguments (`x-queue-type: 'quorum'`). */
  arguments?: Record<string, unknown>;
}

/** Options of a RabbitMQ source. */
export interface RabbitSourceOptions extends ReconnectOptions, BodyOptions {
  /** The event source name its messages are stored under (dedupe is per source and id). */
  name: string;
  /** `amqp://user:password@host:5672/vhost`. */
  url: string;
  queue: string;
  /** Prefetch: messages unacked at once; default 64. */
  capacity?: number;
  /** Default 'message-id' (the AMQP property); or a header, or a field of the JSON body. */
  id?: RabbitIdFrom;
  /** Default 'type': the AMQP `type` property, else the routing key; or 'routing-key', or a header. */
  type?: RabbitTypeFrom;
  /** Declares the queue with these settings; without it the queue must exist (checked, never changed). */
  declare?: RabbitQueueDeclaration;
  /**
   * How long a message given back (the transaction failed) waits before it is requeued; doubled for
   * each give-back that follows without an ack between, up to 30 s. Default '1s'.
   */
  retryDelay?: Duration;
  /** @deprecated Write `retryDelay`; goes in 0.2.0. */
  retryDelayMs?: number;
  /** One line per change of connection state. */
  logger?: OncelyLogger;
}

// The longest wait of a message given back: a database down for long is retried twice a minute.
const MAX_RETRY_DELAY_MS = 30_000;

/**
 * A RabbitMQ queue as an inbox source: manual acks, prefetch = capacity, so no more messages are
 * in flight than the inbox takes; an ack is sent only when the inbox acks (after its commit). A
 * message the inbox rejects is nacked without requeue: the queue's dead-letter exchange gets it,
 * if it has one. After a connection loss it reconnects with backoff; the broker redelivers what
 * was unacked. Lag is the queue's ready message count.
 * @example
 * const source = rabbitmqSource({ name: 'orders', url: 'amqp://guest:guest@127.0.0.1:5672', queue: 'orders' });
 * await eventInbox(source, { db, events: host.events }).start();
 */
export function rabbitmqSource(options: RabbitSourceOptions): BrokerSource {
  return new RabbitSource(options);
}

class RabbitSource implements BrokerSource {
  readonly name: string;
  private readonly life: ConnectionLife;
  private readonly pause = new Pause();
  private readonly capacity: number;
  private readonly maxBodyBytes: number;
  private readonly retryDelayMs: number;
  private readonly reconnect: ReconnectDelays;
  private feed: Feed | undefined;
  private stopped = true;
  private connection: AmqpConnection | undefined;
  // Timers of messages given back, waiting out their delay before the requeue.
  private readonly waiting = new Set<NodeJS.Timeout>();
  // Give-backs since the last ack: a failed batch's messages go back together, as one step.
  private retryStreak = 0;
  private channel: AmqpChannel | undefined;
  private loop: Promise<void> | undefined;
  private lagAt = 0;

  constructor(private readonly options: RabbitSourceOptions) {
    this.name = options.name;
    this.capacity = options.capacity ?? 64;
    if (!Number.isInteger(this.capacity) || this.capacity < 1 || this.capacity > 65_535)
      throw new OncelyError(
        'CONFIG_INVALID',
        `rabbitmq source ${options.name}: capacity must be an integer in 1..65535`,
      );
    if (!options.queue) throw new OncelyError('CONFIG_INVALID', `rabbitmq source ${options.name}: a queue is needed`);
    this.maxBodyBytes = bodyLimit(options, `rabbitmq source ${options.name}`);
    this.retryDelayMs = durationOption(
      options,
      'retryDelay',
      'retryDelayMs',
      '1s',
      `rabbitmq source ${options.name}`,
      'CONFIG_INVALID',
    );
    this.reconnect = reconnectDelays(options, `rabbitmq source ${options.name}`);
    this.life = new ConnectionLife(`rabbitmq source ${options.name}`, options.logger);
  }

  async start(handle: (batch: BrokerMessage[]) => Promise<void>): Promise<void> {
    if (!this.stopped) return;
    this.stopped = false;
    this.feed = new Feed(handle, this.capacity);
    this.life.set('connecting');
    this.loop = keepConnected(
      this.life,
      () => this.stopped,
      () => this.session(),
      this.pause.wait,
      this.reconnect,
    );
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.pause.wake();
    await this.feed?.close();
    // Requeued by the broker when the channel closes: nothing left to wait for.
    for (const timer of this.waiting) clearTimeout(timer);
    this.waiting.clear();
    // The channel first: its close-ok comes after the broker took the acks sent before it, where a
    // connection's close (on channel 0) can overtake them and requeue what was just acked.
    await this.channel?.close().catch(() => {});
    // Closing the connection ends the session; the broker requeues whatever was not acked.
    await this.connection?.close().catch(() => {});
    await this.loop;
    this.life.set('stopped');
  }

  status(): SourceStatus {
    return this.life.status();
  }

  // One connection's life: resolves or throws when the connection or its channel ends.
  private async session(): Promise<void> {
    const connection = await connect(this.options.url, `oncely ${this.name}`);
    this.connection = connection;
    const ended = new Promise<void>((resolve, reject) => {
      connection.on('error', () => {});
      connection.on('close', (error) => (error ? reject(error) : resolve()));
    });
    try {
      const channel = await connection.createChannel();
      this.channel = channel;
      channel.on('error', () => {});
      channel.on('close', () => void connection.close().catch(() => {}));
      const { queue, declare } = this.options;
      const info = declare
        ? await channel.assertQueue(queue, queueArguments(declare))
        : await channel.checkQueue(queue);
      this.life.lag = info.messageCount;
      await channel.prefetch(this.capacity);
      if (this.stopped) return;
      const acks = new ChannelAcks(channel);
      await channel.consume(queue, (message) => this.receive(channel, acks, message), { noAck: false });
      this.life.set('connected');
    } catch (error) {
      await connection.close().catch(() => {});
      throw error;
    } finally {
      if (this.stopped) await connection.close().catch(() => {});
    }
    await ended;
  }

  private receive(channel: AmqpChannel, acks: ChannelAcks, message: AmqpMessage | null): void {
    // null: the broker cancelled the consumer (the queue was deleted); a new session consumes again.
    if (message === null) return void channel.close().catch(() => {});
    acks.delivered(message);
    const { data, refusal } = readBody(message.content, this.maxBodyBytes);
    this.feed?.push([
      {
        id: idOf(message, data, this.options.id ?? 'message-id'),
        type: typeOf(message, this.options.type ?? 'type'),
        data,
        traceId: traceIdIn(Object.entries(message.properties.headers ?? {})),
        ...(refusal !== undefined ? { refusal } : {}),
        ack: async () => {
          this.retryStreak = 0;
          acks.ack(message);
        },
        retry: async () => this.giveBack(acks, message),
        reject: async () => acks.nack(message, false),
      },
    ]);
    this.refreshLag(channel);
  }

  /**
   * Requeues a message after a delay instead of at once: RabbitMQ redelivers a requeued message
   * immediately, so a database that fails every batch would otherwise get the same batch back in a
   * loop. While it waits the message keeps its prefetch slot, so nothing new is delivered either.
   */
  private giveBack(acks: ChannelAcks, message: AmqpMessage): void {
    // The first message of a failed batch opens a step; the rest of it wait alike.
    if (this.waiting.size === 0) this.retryStreak++;
    const delay = Math.min(MAX_RETRY_DELAY_MS, this.retryDelayMs * 2 ** Math.min(this.retryStreak - 1, 15));
    const timer = setTimeout(() => {
      this.waiting.delete(timer);
      acks.nack(message, true);
    }, delay);
    timer.unref();
    this.waiting.add(timer);
  }

  // Lag (ready messages) read at most once a second, while messages flow.
  private refreshLag(channel: AmqpChannel): void {
    const now = Date.now();
    if (now - this.lagAt < 1_000) return;
    this.lagAt = now;
    channel.checkQueue(this.options.queue).then(
      (info) => {
        this.life.lag = info.messageCount;
      },
      () => {},
    );
  }
}

/**
 * The settlements of one channel's deliveries. Acks given in one turn go out together: the acked
 * prefix of the deliveries still open (in delivery order) as one `basic.ack` with `multiple`, the
 * rest one by one; a batch's acks are one frame instead of one each. An ack or nack on a channel
 * that closed meanwhile cannot be sent: the broker requeued the message already, and its
 * redelivery is answered as a duplicate. So a closed channel is not an error here.
 */
class ChannelAcks {
  // Delivered and not yet settled towards the broker, in delivery order.
  private readonly open: AmqpMessage[] = [];
  private readonly acked = new Set<AmqpMessage>();
  private scheduled = false;

  constructor(private readonly channel: AmqpChannel) {}

  delivered(message: AmqpMessage): void {
    this.open.push(message);
  }

  ack(message: AmqpMessage): void {
    this.acked.add(message);
    if (this.scheduled) return;
    this.scheduled = true;
    queueMicrotask(() => this.flush());
  }

  nack(message: AmqpMessage, requeue: boolean): void {
    this.forget(message);
    send(() => this.channel.nack(message, false, requeue));
  }

  private flush(): void {
    this.scheduled = false;
    let upTo: AmqpMessage | undefined;
    while (this.open.length > 0 && this.acked.has(this.open[0] as AmqpMessage)) {
      upTo = this.open.shift() as AmqpMessage;
      this.acked.delete(upTo);
    }
    if (upTo) {
      const last = upTo;
      send(() => this.channel.ack(last, true));
    }
    for (const message of this.acked) {
      this.forget(message);
      send(() => this.channel.ack(message));
    }
    this.acked.clear();
  }

  private forget(message: AmqpMessage): void {
    const at = this.open.indexOf(message);
    if (at >= 0) this.open.splice(at, 1);
  }
}

function send(settle: () => void): void {
  try {
    settle();
  } catch {}
}

function queueArguments(declare: RabbitQueueDeclaration): Record<string, unknown> {
  return {
    durable: declare.durable ?? true,
    ...(declare.deadLetterExchange !== undefined ? { deadLetterExchange: declare.deadLetterExchange } : {}),
    ...(declare.deadLetterRoutingKey !== undefined ? { deadLetterRoutingKey: declare.deadLetterRoutingKey } : {}),
    ...(declare.arguments ? { arguments: declare.arguments } : {}),
  };
}

function text(value: unknown): string | undefined {
  if (typeof value === 'string') return value === '' ? undefined : value;
  if (typeof value === 'number' || typeof value === 'bigint') return String(value);
  if (Buffer.isBuffer(value)) return value.toString('utf8') || undefined;
  return undefined;
}

function idOf(message: AmqpMessage, data: unknown, from: RabbitIdFrom): string | undefined {
  if (from === 'message-id') return text(message.properties.messageId);
  if ('header' in from) return text(message.properties.headers?.[from.header]);
  return data !== null && typeof data === 'object' ? text((data as Record<string, unknown>)[from.field]) : undefined;
}

function typeOf(message: AmqpMessage, from: RabbitTypeFrom): string {
  if (from === 'routing-key') return message.fields.routingKey;
  if (from === 'type') return text(message.properties.type) ?? message.fields.routingKey;
  return text(message.properties.headers?.[from.header]) ?? message.fields.routingKey;
}

/** Options of a RabbitMQ outbox target. */
export interface RabbitTargetOptions {
  url: string;
  /** The exchange published to; default '' (the default exchange: the routing key names a queue). */
  exchange?: string;
  /** Default the outbox topic. */
  routingKey?: string;
  logger?: OncelyLogger;
}

/**
 * A RabbitMQ exchange as an outbox target: each row is published persistent with `messageId` =
 * the outbox id and `type` = its topic, on a confirm channel, mandatory; `deliver` resolves only
 * after the broker's confirm, and fails when the broker nacked or could route it to no queue (the
 * relay retries it later). A relay that dies between confirm and mark publishes again with the same
 * `messageId`: a downstream oncely source dedupes it.
 * @example
 * const target = rabbitmqTarget({ url: 'amqp://guest:guest@127.0.0.1:5672', exchange: 'events' });
 * new OutboxRelay(db, { target }).start();
 */
export function rabbitmqTarget(options: RabbitTargetOptions): BrokerTarget {
  return new RabbitTarget(options);
}

class RabbitTarget implements BrokerTarget {
  private readonly life: ConnectionLife;
  private channel: Promise<{ connection: AmqpConnection; channel: AmqpChannel }> | undefined;
  // Ids the broker returned unroutable; their confirm (which follows the return) fails the delivery.
  private readonly returned = new Set<string>();
  private closed = false;

  constructor(private readonly options: RabbitTargetOptions) {
    this.life = new ConnectionLife('rabbitmq target', options.logger);
  }

  async deliver(message: OutboxMessage): Promise<void> {
    if (this.closed) throw new OncelyError('CLOSED', 'the rabbitmq target is closed');
    const { channel } = await this.open();
    const routingKey = this.options.routingKey ?? message.topic;
    const body = Buffer.from(JSON.stringify(message.payload ?? null));
    await new Promise<void>((resolve, reject) => {
      channel.publish(
        this.options.exchange ?? '',
        routingKey,
        body,
        {
          persistent: true,
          mandatory: true,
          messageId: message.id,
          type: message.topic,
          contentType: 'application/json',
          timestamp: Math.floor(message.createdAt / 1000),
          ...(message.traceId !== undefined ? { headers: { [TRACE_NAME]: message.traceId } } : {}),
        },
        (error) => {
          const unroutable = this.returned.delete(message.id);
          if (error) reject(new Error(`rabbitmq nacked outbox message ${message.id}`));
          else if (unroutable)
            reject(new Error(`rabbitmq routed outbox message ${message.id} to no queue (${routingKey})`));
          else resolve();
        },
      );
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    const open = this.channel;
    this.channel = undefined;
    if (open) await open.then(({ connection }) => connection.close()).catch(() => {});
    this.life.set('stopped');
  }

  status(): SourceStatus {
    return this.life.status();
  }

  // One connection and confirm channel, opened on first use and again after either closed.
  private open(): Promise<{ connection: AmqpConnection; channel: AmqpChannel }> {
    if (this.channel) return this.channel;
    if (this.life.state === 'stopped') this.life.set('connecting');
    const opening = (async () => {
      const connection = await connect(this.options.url, 'oncely outbox');
      try {
        const channel = await connection.createConfirmChannel();
        const lost = (error?: unknown) => {
          if (this.channel === opening) this.channel = undefined;
          if (!this.closed) this.life.set('reconnecting', error ?? new Error('the channel closed'));
        };
        connection.on('error', () => {});
        channel.on('error', () => {});
        connection.on('close', lost);
        channel.on('close', () => {
          lost();
          void connection.close().catch(() => {});
        });
        channel.on('return', (returned) => {
          const id = text(returned.properties.messageId);
          if (id) this.returned.add(id);
        });
        this.life.set('connected');
        return { connection, channel };
      } catch (error) {
        await connection.close().catch(() => {});
        throw error;
      }
    })();
    this.channel = opening;
    opening.catch((error: unknown) => {
      if (this.channel === opening) this.channel = undefined;
      this.life.set(this.life.state === 'connecting' ? 'connecting' : 'reconnecting', error);
    });
    return opening;
  }
}
