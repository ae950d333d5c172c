/**
 * NATS JetStream: a durable pull consumer as an inbox source (explicit acks, messages pulled only as
 * capacity frees) and a stream as an outbox target (publish with `Nats-Msg-Id`, await the PubAck).
 * Needs the optional peers `@nats-io/transport-node` and `@nats-io/jetstream`, loaded when a source
 * or target first connects.
 */
import type { AckPolicy, JetStreamClient, JetStreamManager, JsMsg } from '@nats-io/jetstream';
import type { MsgHdrs, NatsConnection } from '@nats-io/transport-node';
import { backoffDelay } from '../core/backoff.js';
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

type Clients = {
  nats: typeof import('@nats-io/transport-node');
  jetstream: typeof import('@nats-io/jetstream');
};

let loaded: Promise<Clients> | undefined;
function clients(): Promise<Clients> {
  loaded ??= loadPeer(
    () => Promise.all([import('@nats-io/transport-node'), import('@nats-io/jetstream')]),
    'a NATS source or target',
    ['@nats-io/transport-node', '@nats-io/jetstream'],
  ).then(
    ([nats, jetstream]) => ({ nats, jetstream }),
    (error: unknown) => {
      loaded = undefined;
      throw error;
    },
  );
  return loaded;
}

// The client's own reconnects run first, for ever, each after a full-jitter delay that grows
// with the attempts since the connection was last up; keepConnected takes over only when the
// connection closed for good or never opened.
async function open(servers: string | string[], name: string): Promise<NatsConnection> {
  const { nats } = await clients();
  let attempts = 0;
  const connection = await nats.connect({
    servers,
    name,
    maxReconnectAttempts: -1,
    reconnectDelayHandler: () => backoffDelay(++attempts, 100, 5_000),
  });
  void (async () => {
    for await (const status of connection.status()) if (status.type === 'reconnect') attempts = 0;
  })();
  return connection;
}

/** Where a NATS source reads a message's event id: the `Nats-Msg-Id` header (default), another header, or a body field. */
export type NatsIdFrom = 'Nats-Msg-Id' | { header: string } | { field: string };
/** Where a NATS source reads a message's event type: the subject (default) or a header. */
export type NatsTypeFrom = 'subject' | { header: string };

/** Options of a JetStream source; a duration is a Duration: '30s', or milliseconds. */
export interface NatsSourceOptions extends ReconnectOptions, BodyOptions {
  /** The event source name its messages are stored under (dedupe is per source and id). */
  name: string;
  /** Default '127.0.0.1:4222'. */
  servers?: string | string[];
  /** The stream, which must exist (the source never creates or changes it). */
  stream: string;
  /** The durable consumer; created when absent (explicit acks, max_ack_pending = capacity), used as it is otherwise. */
  durable: string;
  /** Subject filter of a consumer the source creates; default the whole stream. */
  subject?: string;
  /** Messages unsettled at once (pulled, not yet acked); default 64. */
  capacity?: number;
  /** ack_wait of a consumer the source creates, at least '1s'; the source calls working() on held messages every third of it. Default '30s'. */
  ackWait?: Duration;
  /** How long a message given back (the transaction failed) waits before its redelivery (nak delay); default '1s'. */
  retryDelay?: Duration;
  /** @deprecated Write `ackWait`; goes in 0.2.0. */
  ackWaitMs?: number;
  /** @deprecated Write `retryDelay`; goes in 0.2.0. */
  retryDelayMs?: number;
  id?: NatsIdFrom;
  type?: NatsTypeFrom;
  /** One line per change of connection state. */
  logger?: OncelyLogger;
}

/**
 * A JetStream durable pull consumer as an inbox source. Messages are pulled only as capacity
 * frees; each is acked when the inbox acks (after its commit), nak'ed with a delay when given back,
 * terminated when rejected (JetStream's dead-letter path: the MSG_TERMINATED advisory). While held,
 * each gets `working()` so a slow transaction does not make the broker redeliver it. Reconnects with
 * backoff; lag is the consumer's `num_pending`.
 * @example
 * const source = natsSource({ name: 'orders', stream: 'ORDERS', durable: 'shop', subject: 'orders.>' });
 * await eventInbox(source, { db, events: host.events }).start();
 */
export function natsSource(options: NatsSourceOptions): BrokerSource {
  return new NatsSource(options);
}

class NatsSource implements BrokerSource {
  readonly name: string;
  private readonly life: ConnectionLife;
  private readonly pause = new Pause();
  private readonly capacity: number;
  private readonly ackWaitMs: number;
  private readonly retryDelayMs: number;
  private readonly reconnect: ReconnectDelays;
  private readonly maxBodyBytes: number;
  private feed: Feed | undefined;
  private stopped = true;
  private connection: NatsConnection | undefined;
  private pull: { stop(): void } | undefined;
  private loop: Promise<void> | undefined;
  // Messages pulled and not yet settled: kept alive with working(), given back on stop.
  private readonly held = new Set<JsMsg>();
  private keepAlive: NodeJS.Timeout | undefined;

  constructor(private readonly options: NatsSourceOptions) {
    this.name = options.name;
    this.capacity = options.capacity ?? 64;
    const what = `nats source ${options.name}`;
    this.ackWaitMs = durationOption(options, 'ackWait', 'ackWaitMs', '30s', what, 'CONFIG_INVALID');
    this.retryDelayMs = durationOption(options, 'retryDelay', 'retryDelayMs', '1s', what, 'CONFIG_INVALID');
    this.reconnect = reconnectDelays(options, what);
    if (!Number.isInteger(this.capacity) || this.capacity < 1)
      throw new OncelyError('CONFIG_INVALID', `${what}: capacity must be a positive integer`);
    if (this.ackWaitMs < 1_000) throw new OncelyError('CONFIG_INVALID', `${what}: ackWait must be at least 1s`);
    if (!options.stream || !options.durable)
      throw new OncelyError('CONFIG_INVALID', `${what}: a stream and a durable consumer name are needed`);
    this.maxBodyBytes = bodyLimit(options, what);
    this.life = new ConnectionLife(what, options.logger);
  }

  async start(handle: (batch: BrokerMessage[]) => Promise<void>): Promise<void> {
    if (!this.stopped) return;
    this.stopped = false;
    this.feed = new Feed(handle, this.capacity);
    this.life.set('connecting');
    this.keepAlive = setInterval(() => {
      for (const message of this.held) message.working();
    }, this.ackWaitMs / 3);
    this.keepAlive.unref();
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
    this.pull?.stop();
    await this.feed?.close();
    clearInterval(this.keepAlive);
    // Dropped by the feed unsettled: given back now rather than after ack_wait.
    for (const message of this.held) message.nak();
    this.held.clear();
    await this.connection?.drain().catch(() => {});
    await this.loop;
    this.life.set('stopped');
  }

  status(): SourceStatus {
    return this.life.status();
  }

  // One connection's life: resolves when it closed for good (the client's own reconnects gave up).
  private async session(): Promise<void> {
    const { jetstream } = await clients();
    const connection = await open(this.options.servers ?? '127.0.0.1:4222', `oncely ${this.name}`);
    // Stopped while connecting: stop() could not close what did not exist yet.
    if (this.stopped) return void (await connection.close());
    this.connection = connection;
    void this.watch(connection);
    try {
      const manager = await jetstream.jetstreamManager(connection);
      await this.ensureConsumer(manager, jetstream.AckPolicy.Explicit);
      const consumer = await jetstream.jetstream(connection).consumers.get(this.options.stream, this.options.durable);
      this.life.set('connected');
      let failures = 0;
      while (!this.stopped && !connection.isClosed()) {
        await this.feed?.whenRoom();
        if (this.stopped) break;
        try {
          const room = this.feed?.room() ?? 0;
          const messages = await consumer.fetch({ max_messages: room, expires: 1_000 });
          this.pull = messages;
          let got = 0;
          for await (const message of messages) {
            got++;
            this.receive(message);
          }
          if (got === 0) void this.refreshLag(manager);
          failures = 0;
        } catch (error) {
          // A pull refused while the client reconnects, or the consumer deleted: tried again after a pause.
          this.life.set(connection.isClosed() ? 'reconnecting' : this.life.state, error);
          await this.pause.wait(backoffDelay(++failures, 100, 2_000));
          if (!this.stopped && !connection.isClosed()) await this.ensureConsumer(manager, jetstream.AckPolicy.Explicit);
        }
      }
    } finally {
      if (!this.stopped) await connection.close().catch(() => {});
    }
  }

  private async ensureConsumer(manager: JetStreamManager, explicit: AckPolicy): Promise<void> {
    const { stream, durable, subject } = this.options;
    try {
      this.life.lag = (await manager.consumers.info(stream, durable)).num_pending;
      return;
    } catch (error) {
      if (!isNotFound(error)) throw error;
    }
    const info = await manager.consumers.add(stream, {
      durable_name: durable,
      ack_policy: explicit,
      max_ack_pending: this.capacity,
      ack_wait: this.ackWaitMs * 1_000_000,
      ...(subject ? { filter_subject: subject } : {}),
    });
    this.life.lag = info.num_pending;
  }

  private async refreshLag(manager: JetStreamManager): Promise<void> {
    try {
      this.life.lag = (await manager.consumers.info(this.options.stream, this.options.durable)).num_pending;
    } catch {
      // Lag is informative: a failed read keeps the last one.
    }
  }

  // The client reconnects by itself: its status says when the connection is lost and back.
  private async watch(connection: NatsConnection): Promise<void> {
    for await (const status of connection.status()) {
      if (this.stopped) return;
      if (status.type === 'disconnect') this.life.set('reconnecting', new Error(`disconnected from ${status.server}`));
      else if (status.type === 'reconnect') this.life.set('connected');
    }
  }

  private receive(message: JsMsg): void {
    this.life.lag = message.info.pending;
    const { data, refusal } = readBody(message.data, this.maxBodyBytes);
    this.held.add(message);
    const settle = (send: () => void) => async () => {
      // Held no more: settled once, by whichever comes first (an ack after stop() gave it back is moot).
      if (!this.held.delete(message)) return;
      try {
        send();
      } catch {
        // The connection closed meanwhile: the broker redelivers it after ack_wait, answered as a duplicate.
      }
    };
    this.feed?.push([
      {
        id: idOf(message, data, this.options.id ?? 'Nats-Msg-Id'),
        type: typeOf(message, this.options.type ?? 'subject'),
        data,
        traceId: traceIdIn((message.headers?.keys() ?? []).map((name) => [name, message.headers?.get(name)])),
        ...(refusal !== undefined ? { refusal } : {}),
        ack: settle(() => message.ack()),
        retry: settle(() => message.nak(this.retryDelayMs)),
        // No reason sent: servers before 2.10 ignore a +TERM that carries one. The inbox logs it.
        reject: settle(() => message.term()),
        working: () => message.working(),
      },
    ]);
  }
}

function isNotFound(error: unknown): boolean {
  // JetStream API error 10014: consumer not found.
  const api = error as { api_error?: { err_code?: number }; code?: unknown } | null;
  return api?.api_error?.err_code === 10014 || /consumer not found/i.test(String((error as Error)?.message));
}

function text(value: string | undefined): string | undefined {
  return value === undefined || value === '' ? undefined : value;
}

function idOf(message: JsMsg, data: unknown, from: NatsIdFrom): string | undefined {
  if (from === 'Nats-Msg-Id') return text(message.headers?.get('Nats-Msg-Id'));
  if ('header' in from) return text(message.headers?.get(from.header));
  const value = data !== null && typeof data === 'object' ? (data as Record<string, unknown>)[from.field] : undefined;
  return typeof value === 'string' ? text(value) : typeof value === 'number' ? String(value) : undefined;
}

function typeOf(message: JsMsg, from: NatsTypeFrom): string {
  if (from === 'subject') return message.subject;
  return text(message.headers?.get(from.header)) ?? message.subject;
}

/** Options of a JetStream outbox target. */
export interface NatsTargetOptions {
  /** Default '127.0.0.1:4222'. */
  servers?: string | string[];
  /** The subject a row is published on; default its topic. A stream must capture it. */
  subject?: (topic: string) => string;
  /** How long to wait for the PubAck; default '5s'. */
  timeout?: Duration;
  /** @deprecated Write `timeout`; goes in 0.2.0. */
  timeoutMs?: number;
  logger?: OncelyLogger;
}

/**
 * A JetStream stream as an outbox target: each row is published with `Nats-Msg-Id` = the outbox id
 * and `deliver` resolves only after the stream's PubAck, so a row is marked delivered only once it
 * is stored. A relay that dies between PubAck and mark publishes again with the same id: the stream
 * drops it within its duplicate window, and an oncely inbox downstream dedupes it beyond.
 * @example
 * const relay = new OutboxRelay(db, { target: natsTarget({ subject: (topic) => `events.${topic}` }) });
 * relay.start();
 */
export function natsTarget(options: NatsTargetOptions = {}): BrokerTarget {
  return new NatsTarget(options);
}

class NatsTarget implements BrokerTarget {
  private readonly life: ConnectionLife;
  private client: Promise<{ connection: NatsConnection; js: JetStreamClient }> | undefined;
  private closed = false;
  private readonly timeoutMs: number;

  constructor(private readonly options: NatsTargetOptions) {
    this.timeoutMs = durationOption(options, 'timeout', 'timeoutMs', '5s', 'nats target', 'CONFIG_INVALID');
    this.life = new ConnectionLife('nats target', options.logger);
  }

  async deliver(message: OutboxMessage): Promise<void> {
    if (this.closed) throw new OncelyError('CLOSED', 'the nats target is closed');
    const { js } = await this.open();
    const subject = this.options.subject ? this.options.subject(message.topic) : message.topic;
    const body = new TextEncoder().encode(JSON.stringify(message.payload ?? null));
    let headers: MsgHdrs | undefined;
    if (message.traceId !== undefined) {
      headers = (await clients()).nats.headers();
      headers.set(TRACE_NAME, message.traceId);
    }
    await js.publish(subject, body, { msgID: message.id, timeout: this.timeoutMs, headers });
  }

  async close(): Promise<void> {
    this.closed = true;
    const client = this.client;
    this.client = undefined;
    if (client) await client.then(({ connection }) => connection.drain()).catch(() => {});
    this.life.set('stopped');
  }

  status(): SourceStatus {
    return this.life.status();
  }

  // One connection, opened at the first delivery; the client reconnects it, and a failed open is tried at the next.
  private open(): Promise<{ connection: NatsConnection; js: JetStreamClient }> {
    this.client ??= (async () => {
      this.life.set('connecting');
      const { jetstream } = await clients();
      const connection = await open(this.options.servers ?? '127.0.0.1:4222', 'oncely outbox');
      if (this.closed) {
        await connection.close();
        throw new OncelyError('CLOSED', 'the nats target is closed');
      }
      this.life.set('connected');
      void (async () => {
        for await (const status of connection.status()) {
          if (status.type === 'disconnect')
            this.life.set('reconnecting', new Error(`disconnected from ${status.server}`));
          else if (status.type === 'reconnect') this.life.set('connected');
        }
      })();
      void connection.closed().then(() => {
        if (!this.closed) {
          this.client = undefined;
          this.life.set('reconnecting', new Error('the connection closed'));
        }
      });
      return { connection, js: jetstream.jetstream(connection) };
    })().catch((error) => {
      this.client = undefined;
      if (!this.closed) this.life.set('reconnecting', error);
      throw error;
    });
    return this.client;
  }
}
