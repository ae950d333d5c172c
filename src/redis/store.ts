import { Batcher } from '../core/batcher.js';
import { InvalidArgumentError, OncelyError } from '../core/errors.js';
import type { RecordId, StoredRecord } from '../core/record.js';
import type {
  Expectation,
  InsertResult,
  RecordPage,
  RecordPatch,
  RecordQuery,
  RecordStore,
  WriteOptions,
} from '../store.js';
import {
  answers,
  encodeRecord,
  expiryOf,
  getAnswer,
  indexKeys,
  insertAnswer,
  recordKey,
  relativeRecordArgs,
  updateAnswer,
  updateArgs,
} from './codec.js';
import { REINDEX } from './list-scripts.js';
import { listPage, listRequest } from './listing.js';
import { GET, INDEX_KEYS, INSERT, INSERT_GIVEN, type RedisScript, UPDATE } from './scripts.js';

export { recordKey };

/**
 * A connected client of either Node driver, of which the store calls one method: an ioredis
 * client's `call`, or a node-redis 4, 5 or 6 client's `sendCommand` (a cluster client of either
 * is not supported). A client passed in stays the caller's: the store never closes it.
 */
export type RedisClientLike =
  | { call(command: string, args: string[]): Promise<unknown> }
  | { sendCommand(args: string[]): Promise<unknown> };

/** Where the store finds Redis: a URL it connects to itself (with ioredis), or a client the caller owns. */
export type RedisStoreOptions = ({ url: string; client?: undefined } | { client: RedisClientLike; url?: undefined }) & {
  /** Prepended to every key the store writes; defaults to 'oncely:'. An ioredis client's own keyPrefix comes before it. */
  prefix?: string;
  /** With `url`: how long a command (connecting included) may wait for Redis before it fails; default 5000 ms. */
  timeoutMs?: number;
};

/** Sends one raw command and resolves with its reply. */
type Send = (command: string, args: string[]) => Promise<unknown>;

// What the store needs from the ioredis client it created. Declared here, not imported, because
// `ioredis` is an optional peer dependency: its types must not leak into the public declarations.
interface Ioredis {
  readonly status: string;
  call(command: string, args: string[]): Promise<unknown>;
  connect(): Promise<unknown>;
  quit(): Promise<unknown>;
  disconnect(): void;
  on(event: 'error', listener: (error: unknown) => void): unknown;
}

/** The client the store made, and its `call` bound once for the batches to send through. */
interface OwnedClient {
  readonly io: Ioredis;
  readonly send: Send;
}

/**
 * Most records in one script run. Large enough to amortise EVALSHA; small on purpose, so a burst
 * of callers goes out as several runs: ioredis writes each at once, Redis starts on the first
 * while Node still prepares the next, and then Node handles one run's answers while Redis works
 * on another. With one large run the two processes take turns, each idle while the other works
 * (measured: about 50k against 85k first executions/s at 32 callers).
 */
export const MAX_BATCH = 8;

/** Script runs of one kind in flight at once; callers arriving meanwhile wait for the next run. */
const MAX_IN_FLIGHT = 8;

/** An insert waiting for its batch: the record, and its ARGV as its script (INSERT or INSERT_GIVEN) reads them. */
interface Insert {
  record: StoredRecord;
  args: string[];
}

/** A conditional write waiting for its batch: its record's id, and its ARGV as UPDATE reads them. */
interface Update {
  id: RecordId;
  args: string[];
}

/**
 * A record store on Redis: each record is one string, and Redis expires records itself; the
 * in_progress and unknown records are also members of a set per state (`<prefix>i:<state>`,
 * kept by the same script runs that write the records), which `list` reads instead of the keyspace.
 * Concurrent calls of one kind are coalesced into atomic Lua script runs of up to MAX_BATCH records (one
 * EVALSHA each, sent at once while fewer than MAX_IN_FLIGHT are out, so a lone call waits for
 * nothing). It cannot join a caller's SQL transaction. Not for Redis Cluster: a batch's script
 * names the keys of many records, which must all live on one node, so it needs a single
 * (standalone) Redis; a cluster client is not supported. Made by `redisStore` (index.ts).
 */
export class RedisStore implements RecordStore {
  readonly kind = 'redis';
  private readonly prefix: string;
  // The index keys every writing script names first (see INDEXED_STATES).
  private readonly indexKeys: string[];
  private readonly timeoutMs: number;
  private readonly url: string | undefined;
  private readonly given: Send | undefined;
  // The client the store made, from creation on (also while it connects), until it is dropped.
  private owned: OwnedClient | undefined;
  private connecting: Promise<OwnedClient> | undefined;
  private closed = false;
  // No `distinct` for updates: the script applies one batch's writes in order, each checked
  // against the record the previous one left, exactly as separate calls in arrival order would
  // run; and batches in flight together run in the order they were sent, on one connection.
  // (PostgreSQL needs it because one UPDATE statement cannot change a row twice.) Errors of one
  // record come back as that record's answer (see scripts.ts), so a failed batch is a failed
  // command for all, never retried item by item: its earlier records may already be written.
  // Two kinds of insert, each its own runs: concurrent calls, so either order is one they could
  // have run in.
  private readonly inserts: Batcher<Insert, InsertResult>;
  private readonly givenInserts: Batcher<Insert, InsertResult>;
  private readonly updates: Batcher<Update, number | null>;
  private readonly reads: Batcher<RecordId, StoredRecord | null>;

  constructor(options: RedisStoreOptions) {
    const { prefix = 'oncely:', timeoutMs = 5_000 } = options;
    if (typeof prefix !== 'string') throw new InvalidArgumentError('redisStore: prefix must be a string');
    if (!Number.isInteger(timeoutMs) || timeoutMs <= 0)
      throw new InvalidArgumentError('redisStore: timeoutMs must be a positive integer');
    if ((options.url === undefined) === (options.client === undefined)) {
      throw new InvalidArgumentError('redisStore: give exactly one of `url` or `client`');
    }
    this.prefix = prefix;
    this.indexKeys = indexKeys(prefix);
    this.timeoutMs = timeoutMs;
    this.url = options.url;
    this.given = options.client ? sender(options.client) : undefined;
    const batching = { maxBatch: MAX_BATCH, maxInFlight: MAX_IN_FLIGHT };
    this.inserts = new Batcher((items: Insert[]) => this.insertMany(INSERT, items), batching);
    this.givenInserts = new Batcher((items: Insert[]) => this.insertMany(INSERT_GIVEN, items), batching);
    this.updates = new Batcher((items: Update[]) => this.updateMany(items), batching);
    this.reads = new Batcher((ids: RecordId[]) => this.getMany(ids), batching);
  }

  // Each hands back its batch's own promise (an Error answer rejects just its caller, see
  // Batcher); a refused argument rejects too, as it would from an async method. Records and
  // patches are encoded by each caller before they join a batch, so a value the codec refuses
  // fails its own call and never the batch it would have joined.
  insertOrGet(record: StoredRecord, tx?: unknown, options?: WriteOptions): Promise<InsertResult> {
    try {
      refuseTransaction(tx);
      if (options?.relative) return this.inserts.push({ record, args: relativeRecordArgs(record) });
      return this.givenInserts.push({ record, args: [encodeRecord(record), expiryOf(record)] });
    } catch (error) {
      return Promise.reject(error);
    }
  }

  update(
    id: RecordId,
    expect: Expectation,
    patch: RecordPatch,
    tx?: unknown,
    options?: WriteOptions,
  ): Promise<number | null> {
    try {
      refuseTransaction(tx);
      return this.updates.push({ id, args: updateArgs(expect, patch, options?.relative === true) });
    } catch (error) {
      return Promise.reject(error);
    }
  }

  get(id: RecordId, tx?: unknown): Promise<StoredRecord | null> {
    try {
      refuseTransaction(tx);
      return this.reads.push(id);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * A page of `query`: `in_progress` and `unknown` from their index by SSCAN (dropping members
   * whose record expired or moved on), other listings by SCAN. A page may hold fewer records than
   * `limit`, even none, before the end: only a null cursor says the listing is done.
   */
  async list(query: RecordQuery): Promise<RecordPage> {
    const request = listRequest(this.prefix, query);
    return listPage(request, await this.send(request.script, request.args));
  }

  /**
   * Adds every in_progress and unknown record to its index, by SCAN of the prefix (a thousand keys
   * per script run), and answers how many joined one. Once after upgrading from a version without
   * the indexes: records written before are not in them, and an unknown one never expires.
   * @example await redisStore({ url }).reindex();
   */
  async reindex(): Promise<number> {
    let cursor = '0';
    let added = 0;
    do {
      const args = [REINDEX.sha, String(INDEX_KEYS), ...this.indexKeys, cursor, '1000'];
      const [next, count] = (await this.send(REINDEX, args)) as [unknown, unknown];
      cursor = String(next);
      added += Number(count);
    } while (cursor !== '0');
    return added;
  }

  /** Always 0: Redis expires records natively (each write sets PEXPIREAT), so there is nothing to purge. */
  async purgeExpired(_now: number, _limit: number): Promise<number> {
    return 0;
  }

  async close(): Promise<void> {
    this.closed = true;
    const pending = this.connecting;
    this.connecting = undefined;
    // `owned` stays set while we wait, so a pending command's timeout can still destroy it.
    const c = await pending?.catch(() => undefined);
    this.owned = undefined;
    // Only a client the store created: a passed-in client belongs to the caller.
    if (!c) return;
    if (c.io.status === 'ready') await c.io.quit().catch(() => dispose(c));
    else dispose(c);
  }

  // One EVALSHA per batch: KEYS are the index keys and the records' keys, ARGV their slots, back to back.
  // INSERT for records whose times are ms from Redis's now (the engine's), INSERT_GIVEN for
  // absolute ones.
  private async insertMany(script: RedisScript, items: Insert[]): Promise<(InsertResult | Error)[]> {
    const args = [script.sha, String(items.length + INDEX_KEYS), ...this.indexKeys];
    for (const item of items) args.push(recordKey(this.prefix, item.record));
    for (const item of items) for (const arg of item.args) args.push(arg);
    // One answer per record, then Redis's clock.
    const reply = answers(await this.send(script, args), items.length, 1);
    const now = Number(reply[items.length]);
    const relative = script === INSERT;
    const out: (InsertResult | Error)[] = [];
    for (let i = 0; i < items.length; i++) {
      out.push(insertAnswer(reply[i], (items[i] as Insert).record, relative, now));
    }
    return out;
  }

  private async updateMany(items: Update[]): Promise<(number | null | Error)[]> {
    const args = [UPDATE.sha, String(items.length + INDEX_KEYS), ...this.indexKeys];
    for (const item of items) args.push(recordKey(this.prefix, item.id));
    for (const item of items) for (const arg of item.args) args.push(arg);
    return answers(await this.send(UPDATE, args), items.length).map(updateAnswer);
  }

  private async getMany(ids: RecordId[]): Promise<(StoredRecord | null | Error)[]> {
    const args = [GET.sha, String(ids.length)];
    for (const id of ids) args.push(recordKey(this.prefix, id));
    const reply = answers(await this.send(GET, args), ids.length);
    const out: (StoredRecord | null | Error)[] = [];
    for (let i = 0; i < reply.length; i++) out.push(getAnswer(reply[i], ids[i] as RecordId));
    return out;
  }

  // The store's own client has no per-command timer (ioredis's commandTimeout arms one per
  // command): this one timer per batch bounds the wait instead, connecting included. A client
  // that timed out is destroyed, failing whatever else waits on it, and the next call connects
  // afresh. A client passed in keeps its own timeouts.
  private send(script: RedisScript, args: string[]): Promise<unknown> {
    if (this.closed) return Promise.reject(new OncelyError('CLOSED', 'the redis store is closed'));
    if (this.given) return evalScript(this.given, script, args);
    // Connected (the usual case): straight to the client, without waiting on the connection first.
    const ready = this.owned?.io.status === 'ready' ? this.owned : undefined;
    return new Promise((resolve, reject) => {
      let used = ready;
      const timer = setTimeout(() => {
        reject(new Error(`redis did not answer within ${this.timeoutMs} ms`));
        this.abandon(used ?? this.owned);
      }, this.timeoutMs);
      const sent = ready
        ? evalScript(ready.send, script, args)
        : this.ownedClient().then((c) => {
            used = c;
            return evalScript(c.send, script, args);
          });
      sent.then(
        (reply) => {
          clearTimeout(timer);
          resolve(reply);
        },
        (error: unknown) => {
          clearTimeout(timer);
          reject(error);
        },
      );
    });
  }

  // Connects on first use, not in the constructor, so a store made while Redis is down works once
  // it is up. A failed attempt is forgotten, and so is a client whose connection later dropped
  // (it does not reconnect, see openClient): the next call simply tries again.
  private ownedClient(): Promise<OwnedClient> {
    if (this.owned && (this.owned.io.status === 'close' || this.owned.io.status === 'end')) this.abandon(this.owned);
    if (!this.connecting) {
      const attempt = this.connect();
      this.connecting = attempt;
      attempt.catch(() => {
        if (this.connecting === attempt) this.connecting = undefined;
      });
    }
    return this.connecting;
  }

  private async connect(): Promise<OwnedClient> {
    const c = await openClient(this.url as string);
    this.owned = c;
    // Without reconnects ioredis rejects connect() with a bare "Connection is closed"; the socket's
    // own error (ECONNREFUSED, ENOTFOUND, ...) comes as an 'error' event first and is the one to report.
    let cause: unknown;
    c.io.on('error', (error) => {
      cause ??= error;
    });
    try {
      await c.io.connect();
      return c;
    } catch (error) {
      this.abandon(c);
      throw cause ?? error;
    }
  }

  private abandon(c: OwnedClient | undefined): void {
    if (!c) return;
    if (this.owned === c) {
      this.owned = undefined;
      this.connecting = undefined;
    }
    dispose(c);
  }
}

function refuseTransaction(tx: unknown): void {
  if (tx !== undefined) throw new InvalidArgumentError('the redis store cannot join a transaction');
}

/** One way to send a raw command through either driver's client. */
function sender(client: RedisClientLike): Send {
  if ('call' in client && typeof client.call === 'function') return (command, args) => client.call(command, args);
  if ('sendCommand' in client && typeof client.sendCommand === 'function')
    return (command, args) => client.sendCommand([command, ...args]);
  throw new InvalidArgumentError('redisStore: `client` must be a connected ioredis or node-redis client');
}

// EVALSHA sends 40 bytes instead of the script; the server loses its script cache on restart or
// SCRIPT FLUSH, and EVAL both runs the script and caches it again for the next EVALSHA. NOSCRIPT
// comes before the script runs, so nothing of the batch was written yet.
function evalScript(send: Send, script: RedisScript, args: string[]): Promise<unknown> {
  return send('EVALSHA', args).catch((error: unknown) => {
    if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
    const retry = args.slice();
    retry[0] = script.source;
    return send('EVAL', retry);
  });
}

/**
 * The ioredis options of a client the store makes; the benchmark gives its floor the same.
 * ioredis reconnects forever and queues commands meanwhile by default, so a request would hang
 * while Redis is down. Instead a failed connect rejects at once, a dropped connection ends the
 * client (the store then makes a new one), and no command waits offline. Commands are written to
 * the socket as they are sent (no auto-pipelining): see MAX_BATCH for why that matters here.
 */
export function ownedClientOptions() {
  return {
    lazyConnect: true,
    enableOfflineQueue: false,
    retryStrategy: () => null,
  };
}

async function openClient(url: string): Promise<OwnedClient> {
  let ioredis: { Redis: new (url: string, options: ReturnType<typeof ownedClientOptions>) => unknown };
  try {
    ioredis = await import('ioredis');
  } catch (cause) {
    throw new OncelyError('INVALID_ARGUMENT', "redisStore({ url }) needs the 'ioredis' package: npm install ioredis", {
      cause,
    });
  }
  const io = new ioredis.Redis(url, ownedClientOptions()) as Ioredis;
  // Without a listener an 'error' event would be logged by ioredis; the failing command already
  // carries the error to the caller.
  io.on('error', () => {});
  return { io, send: io.call.bind(io) };
}

function dispose(c: OwnedClient): void {
  try {
    c.io.disconnect();
  } catch {
    // Already torn down by the driver; nothing is left to release.
  }
}
