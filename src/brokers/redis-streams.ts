/**
 * Redis Streams: a consumer group as an inbox source (XREADGROUP, XACK after the commit, pending
 * entries of a dead consumer claimed back with XAUTOCLAIM) and XADD as an outbox target. Uses the
 * optional peer `ioredis`, the client the Redis record store uses, loaded when first connecting.
 */
import { hostname } from 'node:os';
import { Batcher } from '../core/batcher.js';
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

// The ioredis members used, declared so its types stay out of the public declarations.
interface Client {
  readonly status: string;
  call(command: string, args: (string | number)[]): Promise<unknown>;
  connect(): Promise<unknown>;
  quit(): Promise<unknown>;
  disconnect(): void;
  on(event: 'error' | 'end', listener: (error?: unknown) => void): unknown;
}

/** A connected ioredis client that never reconnects by itself: the source's loop does, with backoff. */
async function connect(url: string, name: string): Promise<Client> {
  const ioredis = (await loadPeer(() => import('ioredis'), 'a Redis Streams source or target', [
    'ioredis',
  ])) as unknown as {
    Redis: new (url: string, options: object) => unknown;
  };
  const client = new ioredis.Redis(url, {
    lazyConnect: true,
    enableOfflineQueue: false,
    retryStrategy: () => null,
    maxRetriesPerRequest: 0,
    // What CLIENT LIST shows, so an operator sees which source a connection is.
    connectionName: name,
  }) as Client;
  let cause: unknown;
  client.on('error', (error) => {
    cause ??= error;
  });
  try {
    await client.connect();
  } catch (error) {
    client.disconnect();
    throw cause ?? error;
  }
  return client;
}

/** The entry fields a source reads and a target writes. */
export interface StreamFields {
  /** The field holding the event id; default 'id'. Entry ids are not used: they change when a message is added again. */
  id?: string;
  /** The field holding the event type; default 'type'. */
  type?: string;
  /** The field holding the JSON body; default 'data'. */
  data?: string;
}

/** Options of a Redis Streams source; a duration is a Duration: '30s', or milliseconds. */
export interface RedisStreamsSourceOptions extends ReconnectOptions, BodyOptions {
  /** The event source name its messages are stored under (dedupe is per source and id). */
  name: string;
  /** `redis://host:6379/0`. */
  url: string;
  stream: string;
  /** The consumer group; created at `from` (with the stream) when absent. */
  group: string;
  /** This process's consumer name in the group; default `<hostname>-<pid>`. A stable name reads its own pending entries at once after a restart. */
  consumer?: string;
  /** Where a new group starts: '0' (the whole stream, the default: nothing is lost) or '$' (new entries only). */
  from?: '0' | '$';
  /** Entries read and not yet acked, at most; default 64. */
  capacity?: number;
  /** How long one XREADGROUP blocks waiting for entries; default '2s'. */
  block?: Duration;
  /** An entry pending this long (its consumer died, or it was given back) is claimed by this consumer; default '30s'. */
  claimIdle?: Duration;
  /** @deprecated Write `block`; goes in 0.2.0. */
  blockMs?: number;
  /** @deprecated Write `claimIdle`; goes in 0.2.0. */
  claimIdleMs?: number;
  fields?: StreamFields;
  /** Where rejected entries are copied before their ack, with a `reason` field; default `<stream>:dead`; false: none. */
  deadLetterStream?: string | false;
  /** One line per change of connection state. */
  logger?: OncelyLogger;
}

/**
 * A Redis Streams consumer group as an inbox source: XREADGROUP with COUNT = the room left of
 * `capacity`, XACK (batched) only when the inbox acks, after its commit. An entry never acked
 * stays pending: it is read again by this consumer after a restart, or claimed by another with
 * XAUTOCLAIM once idle for `claimIdle`, so a crashed host loses nothing. A retried entry is
 * claimed again the same way. A rejected entry is copied to the dead-letter stream and acked.
 * Lag is XINFO GROUPS `lag`.
 * @example
 * const source = redisStreamsSource({ name: 'orders', url: 'redis://127.0.0.1:6379', stream: 'orders', group: 'shop' });
 * await eventInbox(source, { db, events: host.events }).start();
 */
export function redisStreamsSource(options: RedisStreamsSourceOptions): BrokerSource {
  return new RedisStreamsSource(options);
}

type Entry = [id: string, fields: string[] | null];
// XREADGROUP answers a map of stream to entries: RESP2 sends it as pairs, RESP3 as one flat list.
type StreamsReply = [string, Entry[]][] | (string | Entry[])[] | null;

function entriesOf(reply: StreamsReply): Entry[] {
  if (!reply || reply.length === 0) return [];
  return (typeof reply[0] === 'string' ? reply[1] : (reply[0] as [string, Entry[]])[1]) as Entry[];
}

class RedisStreamsSource implements BrokerSource {
  readonly name: string;
  private readonly life: ConnectionLife;
  private readonly pause = new Pause();
  private readonly capacity: number;
  private readonly consumer: string;
  private readonly claimIdleMs: number;
  private readonly blockMs: number;
  private readonly reconnect: ReconnectDelays;
  private readonly fields: Required<StreamFields>;
  private readonly deadLetters: string | false;
  private readonly maxBodyBytes: number;
  private readonly acks: Batcher<string, null>;
  // Entries handed to the inbox and not settled: read again (own pending after a reconnect, or
  // claimed back while slow) they are skipped, not handed twice.
  private readonly holding = new Set<string>();
  private feed: Feed | undefined;
  private reader: Client | undefined;
  private commands: Client | undefined;
  private stopped = true;
  private loop: Promise<void> | undefined;

  constructor(private readonly options: RedisStreamsSourceOptions) {
    const { name, stream, group } = options;
    this.name = name;
    this.capacity = options.capacity ?? 64;
    if (!Number.isInteger(this.capacity) || this.capacity < 1)
      throw new OncelyError('CONFIG_INVALID', `redis streams source ${name}: capacity must be a positive integer`);
    if (!stream || !group)
      throw new OncelyError('CONFIG_INVALID', `redis streams source ${name}: a stream and a group are needed`);
    this.consumer = options.consumer ?? `${hostname()}-${process.pid}`;
    const what = `redis streams source ${name}`;
    this.claimIdleMs = durationOption(options, 'claimIdle', 'claimIdleMs', '30s', what, 'CONFIG_INVALID');
    this.blockMs = durationOption(options, 'block', 'blockMs', '2s', what, 'CONFIG_INVALID');
    this.reconnect = reconnectDelays(options, what);
    this.fields = { id: 'id', type: 'type', data: 'data', ...options.fields };
    this.deadLetters = options.deadLetterStream ?? `${stream}:dead`;
    this.maxBodyBytes = bodyLimit(options, what);
    this.life = new ConnectionLife(what, options.logger);
    // Acks of one batch go as one XACK; on the connection current when sent (ids are the group's, not a connection's).
    this.acks = new Batcher(async (ids) => {
      if (!this.commands) throw new Error('redis is not connected');
      await this.commands.call('XACK', [stream, group, ...ids]);
      return ids.map(() => null);
    });
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
    // Ends a blocked XREADGROUP at once; entries read and not handed stay pending for the next start.
    this.reader?.disconnect();
    await this.feed?.close();
    await this.loop;
    await this.commands?.quit().catch(() => {});
    this.commands = undefined;
    this.life.set('stopped');
  }

  status(): SourceStatus {
    return this.life.status();
  }

  private async session(): Promise<void> {
    const { url, stream, group } = this.options;
    this.commands?.disconnect();
    const client = `oncely-${this.name.replace(/[^\w.:-]/g, '_')}`;
    this.commands = await connect(url, client);
    const reader = await connect(url, `${client}-reader`);
    this.reader = reader;
    try {
      try {
        await this.commands.call('XGROUP', ['CREATE', stream, group, this.options.from ?? '0', 'MKSTREAM']);
      } catch (error) {
        if (!String(error).includes('BUSYGROUP')) throw error;
      }
      await this.refreshLag();
      this.life.set('connected');
      // This consumer's own pending entries first (read before a crash or a stop, never acked),
      // paged from `pendingAfter`; then new entries ('>').
      let pendingAfter: string | undefined = '0';
      let claimCursor = '0-0';
      let claimAt = 0;
      let lagAt = Date.now();
      while (!this.stopped) {
        await this.feed?.whenRoom();
        const room = this.feed?.room() ?? 0;
        if (this.stopped || room === 0) continue;
        // Entries idle past claimIdle in any consumer of the group (a dead host's, or given back),
        // once this consumer's own pending ones are read.
        if (pendingAfter === undefined && Date.now() >= claimAt) {
          const [next, claimed] = (await this.commands.call('XAUTOCLAIM', [
            stream,
            group,
            this.consumer,
            this.claimIdleMs,
            claimCursor,
            'COUNT',
            room,
          ])) as [string, Entry[]];
          claimCursor = next;
          if (next === '0-0') claimAt = Date.now() + Math.max(1, Math.floor(this.claimIdleMs / 2));
          if (claimed.length > 0) {
            this.push(claimed);
            continue;
          }
        }
        const reply = (await reader.call('XREADGROUP', [
          'GROUP',
          group,
          this.consumer,
          'COUNT',
          room,
          ...(pendingAfter === undefined ? ['BLOCK', this.blockMs] : []),
          'STREAMS',
          stream,
          pendingAfter ?? '>',
        ])) as StreamsReply;
        const entries = entriesOf(reply);
        if (pendingAfter !== undefined)
          pendingAfter = entries.length > 0 ? entries[entries.length - 1]?.[0] : undefined;
        this.push(entries);
        if (Date.now() - lagAt >= 1_000) {
          lagAt = Date.now();
          await this.refreshLag();
        }
      }
    } finally {
      reader.disconnect();
      if (this.reader === reader) this.reader = undefined;
    }
  }

  private push(entries: Entry[]): void {
    const messages: BrokerMessage[] = [];
    for (const [entryId, raw] of entries) {
      if (this.holding.has(entryId)) continue;
      // A pending entry trimmed from the stream meanwhile has no fields left: nothing to take, ack it.
      if (raw === null) {
        void this.acks.push(entryId).catch(() => {});
        continue;
      }
      const fields = new Map<string, string>();
      for (let i = 0; i + 1 < raw.length; i += 2) fields.set(String(raw[i]), String(raw[i + 1]));
      const { data, refusal } = readBody(fields.get(this.fields.data), this.maxBodyBytes);
      this.holding.add(entryId);
      const id = fields.get(this.fields.id);
      const release = () => void this.holding.delete(entryId);
      messages.push({
        id: id === '' ? undefined : id,
        type: fields.get(this.fields.type) ?? this.options.stream,
        data,
        traceId: traceIdIn(fields),
        ...(refusal !== undefined ? { refusal } : {}),
        ack: () =>
          this.acks
            .push(entryId)
            .then(() => {})
            .finally(release),
        // Left pending: XAUTOCLAIM takes it again once idle for claimIdle.
        retry: async () => release(),
        reject: (reason) => this.reject(entryId, raw, reason).finally(release),
      });
    }
    if (messages.length > 0) this.feed?.push(messages);
  }

  private async reject(entryId: string, raw: string[], reason: string): Promise<void> {
    if (this.deadLetters !== false) {
      if (!this.commands) throw new Error('redis is not connected');
      await this.commands.call('XADD', [this.deadLetters, '*', ...raw, 'reason', reason, 'entry', entryId]);
    }
    await this.acks.push(entryId);
  }

  private async refreshLag(): Promise<void> {
    const groups = (await this.commands?.call('XINFO', ['GROUPS', this.options.stream])) as unknown[][] | undefined;
    for (const info of groups ?? []) {
      const group = new Map<string, unknown>();
      for (let i = 0; i + 1 < info.length; i += 2) group.set(String(info[i]), info[i + 1]);
      if (group.get('name') !== this.options.group) continue;
      // Redis 7 tells the lag; null when it cannot (entries deleted from the middle), older servers not at all.
      const lag = group.get('lag');
      this.life.lag = typeof lag === 'number' ? lag : undefined;
    }
  }
}

/** Options of a Redis Streams outbox target. */
export interface RedisStreamsTargetOptions {
  url: string;
  /** The stream written to; default the outbox topic. */
  stream?: string;
  /** Trims the stream to about this many entries (XADD MAXLEN ~); default no trim. */
  maxLength?: number;
  fields?: StreamFields;
  logger?: OncelyLogger;
}

/**
 * XADD as an outbox target: each row becomes an entry with the outbox id, the topic and the JSON
 * payload as fields; `deliver` resolves when Redis answered the XADD. A relay that dies between
 * XADD and mark adds it again: a downstream oncely source dedupes on the id field.
 * @example
 * new OutboxRelay(db, { target: redisStreamsTarget({ url: 'redis://127.0.0.1:6379', stream: 'orders' }) }).start();
 */
export function redisStreamsTarget(options: RedisStreamsTargetOptions): BrokerTarget {
  return new RedisStreamsTarget(options);
}

class RedisStreamsTarget implements BrokerTarget {
  private readonly life: ConnectionLife;
  private readonly fields: Required<StreamFields>;
  private client: Promise<Client> | undefined;
  private closed = false;

  constructor(private readonly options: RedisStreamsTargetOptions) {
    this.life = new ConnectionLife('redis streams target', options.logger);
    this.fields = { id: 'id', type: 'type', data: 'data', ...options.fields };
  }

  async deliver(message: OutboxMessage): Promise<void> {
    if (this.closed) throw new OncelyError('CLOSED', 'the redis streams target is closed');
    const client = await this.open();
    const trim = this.options.maxLength === undefined ? [] : ['MAXLEN', '~', this.options.maxLength];
    await client.call('XADD', [
      this.options.stream ?? message.topic,
      ...trim,
      '*',
      this.fields.id,
      message.id,
      this.fields.type,
      message.topic,
      this.fields.data,
      JSON.stringify(message.payload ?? null),
      ...(message.traceId !== undefined ? [TRACE_NAME, message.traceId] : []),
    ]);
  }

  async close(): Promise<void> {
    this.closed = true;
    const open = this.client;
    this.client = undefined;
    if (open) await open.then((c) => c.quit()).catch(() => {});
    this.life.set('stopped');
  }

  status(): SourceStatus {
    return this.life.status();
  }

  // Connects on first use and again once the connection ended (the client does not reconnect itself).
  private open(): Promise<Client> {
    if (this.client) return this.client;
    if (this.life.state === 'stopped') this.life.set('connecting');
    const opening = connect(this.options.url, 'oncely-outbox').then((client) => {
      client.on('end', () => {
        if (this.client === opening) this.client = undefined;
        if (!this.closed) this.life.set('reconnecting', new Error('the connection to redis ended'));
      });
      this.life.set('connected');
      return client;
    });
    this.client = opening;
    opening.catch((error: unknown) => {
      if (this.client === opening) this.client = undefined;
      this.life.set(this.life.state === 'connecting' ? 'connecting' : 'reconnecting', error);
    });
    return opening;
  }
}
