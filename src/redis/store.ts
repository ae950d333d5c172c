import { Batcher } from '../core/batcher.js';
import { durationOption } from '../core/duration-option.js';
import { InvalidArgumentError, OncelyError } from '../core/errors.js';
import type { RecordId, StoredRecord } from '../core/record.js';
import { checkUrl } from '../core/url.js';
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
  type Durability,
  dispose,
  evalScript,
  isCluster,
  type OwnedClient,
  openClient,
  type RedisClientLike,
  type RedisClusterNode,
  type RedisStoreOptions,
  type Senders,
  senders,
} from './client.js';
import { shardOf, shardPrefixes } from './cluster.js';
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
import {
  LIST_TIME_BUDGET_MS,
  listCursor,
  listRequest,
  listState,
  memberOf,
  openShards,
  takeReplies,
} from './listing.js';
import { GET, INDEX_KEYS, INSERT, INSERT_GIVEN, type RedisScript, UPDATE } from './scripts.js';

export { ownedClientOptions } from './client.js';
export { type RedisClientLike, type RedisClusterNode, type RedisStoreOptions, recordKey };

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

/**
 * Script runs of one kind in flight at once per shard of a cluster (cluster.ts): fewer than on a
 * single Redis, since the shards' runs are in flight side by side, and a shard's callers only
 * coalesce once its runs are all out.
 */
const SHARD_IN_FLIGHT = 2;

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
 * The keys and batches of one shard: the whole store on a single Redis, one hash tag on a
 * cluster (see cluster.ts). A script run names the keys of one shard only, so on a cluster all
 * its keys are in one slot.
 */
interface Shard {
  readonly prefix: string;
  // The index keys every writing script names first (see INDEXED_STATES).
  readonly indexKeys: string[];
  // No `distinct` for updates: the script applies one batch's writes in order, each checked
  // against the record the previous one left, exactly as separate calls in arrival order would
  // run; and batches in flight together run in the order they were sent, on one connection (on a
  // cluster, one per node: a record's runs all go to its slot's master). (PostgreSQL needs it
  // because one UPDATE statement cannot change a row twice.) Errors of one record come back as
  // that record's answer (see scripts.ts), so a failed batch is a failed command for all, never
  // retried item by item: its earlier records may already be written. Two kinds of insert, each
  // its own runs: concurrent calls, so either order is one they could have run in.
  readonly inserts: Batcher<Insert, InsertResult>;
  readonly givenInserts: Batcher<Insert, InsertResult>;
  readonly updates: Batcher<Update, number | null>;
  readonly reads: Batcher<RecordId, StoredRecord | null>;
}

/**
 * A record store on Redis: each record is one string, and Redis expires records itself; the
 * in_progress and unknown records are also members of a set per state (`<prefix>i:<state>`,
 * kept by the same script runs that write the records), which `list` reads instead of the keyspace.
 * Concurrent calls of one kind are coalesced into atomic Lua script runs of up to MAX_BATCH records (one
 * EVALSHA each, sent at once while fewer than MAX_IN_FLIGHT are out, so a lone call waits for
 * nothing). It cannot join a caller's SQL transaction. On Redis Cluster the records are spread
 * over SHARDS hash tags, each with its own index sets and batches (cluster.ts), since a script
 * run must name keys of one slot; a single Redis keeps the one layout it always had. Made by
 * `redisStore` (index.ts).
 */
export class RedisStore implements RecordStore {
  readonly kind = 'redis';
  private readonly shards: Shard[];
  private readonly timeoutMs: number;
  private readonly target: string | RedisClusterNode[] | undefined;
  private readonly durability: Durability;
  private readonly given: Senders | undefined;
  private readonly cluster: boolean;
  // The client the store made, from creation on (also while it connects), until it is dropped.
  private owned: OwnedClient | undefined;
  private connecting: Promise<OwnedClient> | undefined;
  private closed = false;

  constructor(options: RedisStoreOptions) {
    const { prefix = 'oncely:', replicas = 0 } = options;
    if (typeof prefix !== 'string') throw new InvalidArgumentError('redisStore: prefix must be a string');
    const timeoutMs = durationOption(options, 'timeout', 'timeoutMs', '5s', 'redisStore');
    if (timeoutMs <= 0) throw new InvalidArgumentError('redisStore: timeout must be longer than 0');
    if (!Number.isInteger(replicas) || replicas < 0)
      throw new InvalidArgumentError('redisStore: replicas must be a whole number');
    const given = [options.url, options.cluster, options.client].filter((v) => v !== undefined);
    if (given.length !== 1)
      throw new InvalidArgumentError('redisStore: give exactly one of `url`, `cluster` or `client`');
    if (options.cluster !== undefined && (!Array.isArray(options.cluster) || options.cluster.length === 0))
      throw new InvalidArgumentError('redisStore: `cluster` must list at least one { host, port }');
    this.timeoutMs = timeoutMs;
    // A malformed URL fails here, not at the first call.
    if (options.url !== undefined) checkUrl(options.url, 'redisStore url');
    this.target = options.url ?? options.cluster;
    // WAIT's own timeout, so a write short of replicas is answered before the store's timer fires.
    this.durability = { replicas, ms: Math.max(1, Math.floor(timeoutMs / 2)) };
    this.given = options.client ? senders(options.client, this.durability) : undefined;
    const cluster = options.cluster !== undefined || (options.client !== undefined && isCluster(options.client));
    this.cluster = cluster;
    // Braces in the prefix would be the keys' hash tag, putting every shard in one slot.
    if (cluster && /[{}]/.test(prefix))
      throw new InvalidArgumentError('redisStore: a prefix on Redis Cluster may not contain { or }');
    const batching = {
      maxBatch: MAX_BATCH,
      maxInFlight: cluster ? SHARD_IN_FLIGHT : MAX_IN_FLIGHT,
      // HTTP requests arrive one socket callback at a time: a few callers wait for the end of the
      // loop's turn, so the requests of one turn share a script run (one write, one EVALSHA)
      // instead of one run each; half a batch or more resumed together by an answer goes at once,
      // so a closed loop's next runs are out while Node still handles the other answers (Batcher).
      gather: 'auto' as const,
    };
    this.shards = (cluster ? shardPrefixes(prefix) : [prefix]).map((p) => {
      const shard: Shard = {
        prefix: p,
        indexKeys: indexKeys(p),
        inserts: new Batcher((items: Insert[]) => this.insertMany(shard, INSERT, items), batching),
        givenInserts: new Batcher((items: Insert[]) => this.insertMany(shard, INSERT_GIVEN, items), batching),
        updates: new Batcher((items: Update[]) => this.updateMany(shard, items), batching),
        reads: new Batcher((ids: RecordId[]) => this.getMany(shard, ids), batching),
      };
      return shard;
    });
  }

  private shard(id: RecordId): Shard {
    return (this.shards.length === 1 ? this.shards[0] : this.shards[shardOf(id)]) as Shard;
  }

  // Each hands back its batch's own promise (an Error answer rejects just its caller, see
  // Batcher); a refused argument rejects too, as it would from an async method. Records and
  // patches are encoded by each caller before they join a batch, so a value the codec refuses
  // fails its own call and never the batch it would have joined.
  insertOrGet(record: StoredRecord, tx?: unknown, options?: WriteOptions): Promise<InsertResult> {
    try {
      refuseTransaction(tx);
      const shard = this.shard(record);
      if (options?.relative) return shard.inserts.push({ record, args: relativeRecordArgs(record) });
      return shard.givenInserts.push({ record, args: [encodeRecord(record), expiryOf(record)] });
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
      return this.shard(id).updates.push({ id, args: updateArgs(expect, patch, options?.relative === true) });
    } catch (error) {
      return Promise.reject(error);
    }
  }

  get(id: RecordId, tx?: unknown): Promise<StoredRecord | null> {
    try {
      refuseTransaction(tx);
      return this.shard(id).reads.push(id);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * A page of `query`: `in_progress` and `unknown` from their index by SSCAN (dropping members
   * whose record expired or moved on), other listings by SCAN. One script run visits a bounded
   * part of the keyspace (list-scripts.ts), which in a Redis shared with other applications may
   * hold few of ours or none: runs follow one another until the page holds `limit` records or
   * the listing is done, for up to LIST_TIME_BUDGET_MS; only past that may a page end short, its
   * cursor resuming where it stopped. On a cluster each shard is scanned on its own, its cursor
   * kept apart (ListState in listing.ts). The shard a page goes on in runs first, alone (a full
   * page reads one shard); with room left the others follow side by side: an index listing in
   * waves of 2, 4... shards (a sparse listing takes a few round trips, not one per shard), a SCAN
   * listing all at once, since each shard's SCAN visits every key of its node (SCAN knows no
   * slots), and the nodes then work side by side.
   */
  async list(query: RecordQuery): Promise<RecordPage> {
    const started = Date.now();
    const state = listState(query, this.shards.length);
    const records: StoredRecord[] = [];
    // SCAN may answer a key twice (Redis says so; seen while a node's table resized): once a page.
    const seen = new Set<string>();
    for (let size = 1; records.length < query.limit; size = state.index ? size * 2 : this.shards.length) {
      const open = openShards(state).slice(0, size);
      // The first wave always runs, so every page moves the listing on.
      if (open.length === 0 || (size > 1 && Date.now() - started >= LIST_TIME_BUDGET_MS)) break;
      const room = query.limit - records.length;
      const requests = open.map((k) => listRequest((this.shards[k] as Shard).prefix, query, state, k, room));
      const replies = await Promise.all(requests.map((r) => this.send(r.script, r.args)));
      for (const record of takeReplies(state, requests, replies, room)) {
        const member = memberOf(record);
        if (seen.has(member)) continue;
        seen.add(member);
        records.push(record);
      }
    }
    return { records, cursor: listCursor(state) };
  }

  /**
   * Adds every in_progress and unknown record to its index, by SCAN of the prefix (a thousand keys
   * per script run), and answers how many joined one. Once after upgrading from a version without
   * the indexes: records written before are not in them, and an unknown one never expires.
   * @example await redisStore({ url }).reindex();
   */
  async reindex(): Promise<number> {
    let added = 0;
    for (const shard of this.shards) {
      let cursor = '0';
      do {
        const args = [REINDEX.sha, String(INDEX_KEYS), ...shard.indexKeys, cursor, '1000'];
        const [next, count] = (await this.send(REINDEX, args)) as [unknown, unknown];
        cursor = String(next);
        added += Number(count);
      } while (cursor !== '0');
    }
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
  private async insertMany(shard: Shard, script: RedisScript, items: Insert[]): Promise<(InsertResult | Error)[]> {
    const args = [script.sha, String(items.length + INDEX_KEYS), ...shard.indexKeys];
    for (const item of items) args.push(recordKey(shard.prefix, item.record));
    for (const item of items) for (const arg of item.args) args.push(arg);
    // One answer per record, then Redis's clock.
    const reply = answers(await this.send(script, args, true), items.length, 1);
    const now = Number(reply[items.length]);
    const relative = script === INSERT;
    const out: (InsertResult | Error)[] = [];
    for (let i = 0; i < items.length; i++) {
      out.push(insertAnswer(reply[i], (items[i] as Insert).record, relative, now));
    }
    return out;
  }

  private async updateMany(shard: Shard, items: Update[]): Promise<(number | null | Error)[]> {
    const args = [UPDATE.sha, String(items.length + INDEX_KEYS), ...shard.indexKeys];
    for (const item of items) args.push(recordKey(shard.prefix, item.id));
    for (const item of items) for (const arg of item.args) args.push(arg);
    return answers(await this.send(UPDATE, args, true), items.length).map(updateAnswer);
  }

  private async getMany(shard: Shard, ids: RecordId[]): Promise<(StoredRecord | null | Error)[]> {
    const args = [GET.sha, String(ids.length)];
    for (const id of ids) args.push(recordKey(shard.prefix, id));
    const reply = answers(await this.send(GET, args), ids.length);
    const out: (StoredRecord | null | Error)[] = [];
    for (let i = 0; i < reply.length; i++) out.push(getAnswer(reply[i], ids[i] as RecordId));
    return out;
  }

  // The store's own client has no per-command timer (ioredis's commandTimeout arms one per
  // command): this one timer per batch bounds the wait instead, connecting included. A client
  // that timed out is destroyed, failing whatever else waits on it, and the next call connects
  // afresh; a cluster client is kept, since ioredis reconnects its nodes and follows a failover
  // itself, and one slow node must not fail the calls of the others. A client passed in keeps
  // its own timeouts. `write` for the runs that write records,
  // which wait for `replicas` when asked.
  private send(script: RedisScript, args: string[], write = false): Promise<unknown> {
    if (this.closed) return Promise.reject(new OncelyError('CLOSED', 'the redis store is closed'));
    const via = (s: Senders) => evalScript(write ? s.write : s.send, script, args);
    if (this.given) return via(this.given);
    // Connected (the usual case): straight to the client, without waiting on the connection first.
    const ready = this.owned?.io.status === 'ready' ? this.owned : undefined;
    return new Promise((resolve, reject) => {
      let used = ready;
      const timer = setTimeout(() => {
        reject(new Error(`redis did not answer within ${this.timeoutMs} ms`));
        if (!this.cluster) this.abandon(used ?? this.owned);
      }, this.timeoutMs);
      const sent = ready
        ? via(ready)
        : this.ownedClient().then((c) => {
            used = c;
            return via(c);
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
    const c = await openClient(this.target as string | RedisClusterNode[], this.durability);
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
