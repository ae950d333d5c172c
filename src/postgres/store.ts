import { Batcher } from '../core/batcher.js';
import { recordCursor, recordFromCursor } from '../core/cursor.js';
import { InvalidArgumentError, OncelyError } from '../core/errors.js';
import { loadPeer } from '../core/peer.js';
import { absoluteRecord, type RecordId, type StoredRecord } from '../core/record.js';
import { compareIds, type Insert, idKey, insertByTimes, insertOncePerId } from '../core/record-batch.js';
import { checkUrl } from '../core/url.js';
import { dataRefusal } from '../db/refusal.js';
import type {
  Expectation,
  InsertResult,
  RecordPage,
  RecordPatch,
  RecordQuery,
  RecordStore,
  WriteOptions,
} from '../store.js';
import type { PgPool, PgQueryable } from './driver.js';
import { migrate } from './migrate.js';
import * as sql from './sql.js';

/** Where the records live, and whether concurrent calls share statements. */
export interface PostgresLayout {
  /** Schema of the records and the migration ledger, created when missing. Default 'oncely'. */
  schema?: string;
  /** Table of the records. Default 'records'. */
  table?: string;
  /** Coalesce concurrent calls (outside a caller's transaction) into multi-row statements. Default true. */
  batch?: boolean;
}

/** Options of postgresStore: a connection string (the store owns its pool) or your pool, and a layout. */
export type PostgresStoreOptions = (
  | { connectionString: string; pool?: undefined }
  | { pool: PgPool; connectionString?: undefined }
) &
  PostgresLayout;

/** Most items in one batched statement. */
const MAX_BATCH = 500;
/** Rounds of insert-then-read before giving up on a key whose record keeps vanishing (purged meanwhile). */
const MAX_INSERT_ROUNDS = 50;

// Data and constraint errors (SQLSTATE classes 22 and 23) belong to one item: retry its batch item by item.
const isItemError = (error: unknown): boolean => dataRefusal(error) !== undefined;

/** A returned row's `now`, the clock's ms: a bigint, so a string unless the pool parses it. */
const rowNow = (row: unknown): number => Number((row as { now: string | number }).now);

/** Inserts records with distinct ids unless present; answers by id key. */
const insertAll = (db: PgQueryable, n: sql.Names, inserts: Insert[]): Promise<Map<string, InsertResult>> =>
  insertByTimes(inserts, (some) => insertSome(db, n, some));

/** Inserts records with distinct ids, all relative or all absolute, unless present; answers by id key. */
async function insertSome(db: PgQueryable, n: sql.Names, inserts: Insert[]): Promise<Map<string, InsertResult>> {
  const answers = new Map<string, InsertResult>();
  // One id order for every process: overlapping batches then wait on each other instead of deadlocking.
  let pending = inserts.length > 1 ? [...inserts].sort((a, b) => compareIds(a.record, b.record)) : inserts;
  for (let round = 0; pending.length > 0; round++) {
    if (round === MAX_INSERT_ROUNDS)
      throw new Error(`record of key "${pending[0]?.record.key}" vanished ${round} times`);
    const only = pending[0] as Insert;
    const insert =
      pending.length === 1
        ? sql.insertOne(n, only.record, only.relative)
        : sql.insertMany(
            n,
            pending.map((p) => p.record),
            only.relative,
          );
    const { rows: insertedRows } = await db.query(insert.text, insert.values);
    // Each inserted row carries the clock's now at the write, which a relative record's times count from.
    const inserted = new Map<string, number>();
    for (const row of insertedRows) inserted.set(idKey(row as RecordId), rowNow(row));
    const conflicts = [];
    for (const p of pending) {
      const now = inserted.get(idKey(p.record));
      if (now === undefined) conflicts.push(p);
      else
        answers.set(idKey(p.record), {
          inserted: true,
          record: p.relative ? absoluteRecord(p.record, now) : { ...p.record },
          now,
        });
    }
    if (conflicts.length === 0) break;
    // A new statement sees rows committed by the transactions our insert conflicted with, which
    // the insert's own snapshot (READ COMMITTED) may not; a row purged meanwhile is inserted again.
    const found = await selectAll(
      db,
      n,
      conflicts.map((p) => p.record),
    );
    pending = conflicts.filter((p) => {
      const existing = found.get(idKey(p.record));
      if (existing) answers.set(idKey(p.record), { inserted: false, record: existing.record, now: existing.now });
      return !existing;
    });
  }
  return answers;
}

/** Reads the records of some ids, each with the database clock's now; answers by id key. */
async function selectAll(
  db: PgQueryable,
  n: sql.Names,
  ids: RecordId[],
): Promise<Map<string, { record: StoredRecord; now: number }>> {
  const select = ids.length === 1 ? sql.selectOne(n, ids[0] as RecordId) : sql.selectMany(n, ids);
  const { rows } = await db.query(select.text, select.values);
  return new Map(
    rows.map((row) => [idKey(row as RecordId), { record: sql.toRecord(row as sql.RecordRow), now: rowNow(row) }]),
  );
}

/** One conditional write of a batch, checked before it is queued. */
type UpdateItem = sql.UpdateItem;

/** Applies conditional writes with distinct ids; answers in item order: the clock's now each applied at, or null. */
async function updateAll(db: PgQueryable, n: sql.Names, items: UpdateItem[]): Promise<(number | null)[]> {
  if (items.length === 1) {
    const { id, expect, patch, relative } = items[0] as UpdateItem;
    const update = sql.updateOne(n, id, expect, patch, relative);
    const { rows } = await db.query(update.text, update.values);
    return [rows.length > 0 ? rowNow(rows[0]) : null];
  }
  const update = sql.updateMany(n, items);
  const { rows } = await db.query(update.text, update.values);
  const answers: (number | null)[] = items.map(() => null);
  for (const row of rows) answers[Number((row as { i: string | number }).i) - 1] = rowNow(row);
  return answers;
}

/** Loads the optional pg driver and opens a pool the store owns. */
async function openPool(connectionString: string): Promise<PgPool> {
  const pg = await loadPeer(() => import('pg'), 'postgresStore({ connectionString })', ['pg']);
  const pool = new (pg.default ?? pg).Pool({ connectionString, max: 10 });
  // An idle connection that dies (server restart) emits 'error'; unheard it would crash the
  // process. The next statement on the pool reports the outage instead.
  pool.on('error', () => {});
  return pool;
}

// Clients given as `tx` that carry the store's 'error' listener, so it is added once per client.
const listening = new WeakSet<object>();

/**
 * A checked-out pg client emits 'error' when its backend dies (pg_terminate_backend, a restart)
 * and, with no listener, that event crashes the process. The statement in flight already fails
 * with the error, which is how the caller hears of it; the listener only keeps the process alive.
 */
function watched<C extends PgQueryable>(client: C): C {
  const emitter = client as unknown as { on?: (event: 'error', listener: (error: unknown) => void) => unknown };
  if (typeof emitter.on === 'function' && !listening.has(client)) {
    listening.add(client);
    emitter.on('error', ignoreClientError);
  }
  return client;
}

function ignoreClientError(): void {
  // The failing statement carries the error to its caller (see watched).
}

/** Checks that `tx` looks like a pg client in a transaction. */
function asClient(tx: unknown): PgQueryable {
  if (typeof tx !== 'object' || tx === null || typeof (tx as PgQueryable).query !== 'function')
    throw new InvalidArgumentError('tx must be a pg client on which you ran BEGIN');
  // A pool would run each statement on some connection outside the caller's transaction.
  if ('totalCount' in tx)
    throw new InvalidArgumentError('tx must be a client from pool.connect() on which you ran BEGIN, not the pool');
  return tx as PgQueryable;
}

/**
 * A record store on PostgreSQL. The schema is created or upgraded on first use (or by `migrate()`);
 * concurrent calls share multi-row statements unless `batch: false`. Pass `tx` (a pg client after
 * BEGIN) to make a record commit or roll back with your own writes; the first use migrates on
 * another connection of the pool, so with a one-connection pool call `migrate()` first.
 */
export class PostgresStore implements RecordStore {
  readonly kind = 'postgres';
  private readonly names: sql.Names;
  private readonly given: PgPool | undefined;
  private readonly connectionString: string | undefined;
  private pooled: Promise<PgPool> | undefined;
  private migrated: Promise<void> | undefined;
  private closed = false;
  private readonly inserts: Batcher<Insert, InsertResult> | undefined;
  private readonly updates: Batcher<UpdateItem, number | null> | undefined;
  private readonly gets: Batcher<RecordId, StoredRecord | null> | undefined;

  constructor(options: PostgresStoreOptions) {
    const { schema = 'oncely', table = 'records', batch = true } = options;
    if (options.pool === undefined && typeof options.connectionString !== 'string')
      throw new InvalidArgumentError('postgresStore needs a connectionString or a pool');
    if (options.pool !== undefined && typeof options.pool.query !== 'function')
      throw new InvalidArgumentError('postgresStore pool must be a pg Pool (or have query, connect and end)');
    this.given = options.pool;
    // A malformed URL fails here, not as a DNS error at the first call.
    if (options.connectionString !== undefined) checkUrl(options.connectionString, 'postgresStore connectionString');
    this.connectionString = options.connectionString;
    this.names = sql.names(schema, table);
    if (!batch) return;
    const batching = { maxBatch: MAX_BATCH, isolate: isItemError };
    this.inserts = new Batcher((inserts) => this.insertBatch(inserts), batching);
    // Two writes to one id in one statement would see the same old row; the second waits its turn.
    this.updates = new Batcher(async (items) => updateAll(await this.ready(), this.names, items), {
      ...batching,
      distinct: (item) => idKey(item.id),
    });
    this.gets = new Batcher((ids) => this.getBatch(ids), batching);
  }

  /** Creates or upgrades the schema; memoized, and retried on the next call when it failed. */
  migrate(): Promise<void> {
    this.migrated ??= this.pool()
      .then((pool) => migrate(pool, this.names))
      .catch((error: unknown) => {
        // Forget the failure, so a store created while the database was down works once it is up.
        this.migrated = undefined;
        throw error;
      });
    return this.migrated;
  }

  async insertOrGet(record: StoredRecord, tx?: unknown, options?: WriteOptions): Promise<InsertResult> {
    const insert: Insert = { record, relative: options?.relative === true };
    if (tx != null) {
      const client = watched(asClient(tx));
      await this.ready();
      return (await insertAll(client, this.names, [insert])).get(idKey(record)) as InsertResult;
    }
    if (this.inserts) return this.inserts.push(insert);
    return (await this.insertBatch([insert]))[0] as InsertResult;
  }

  async update(
    id: RecordId,
    expect: Expectation,
    patch: RecordPatch,
    tx?: unknown,
    options?: WriteOptions,
  ): Promise<number | null> {
    // Checked here, so a bad patch fails its caller alone and never a whole batch.
    sql.patchMask(patch);
    const item = {
      id: { tenant: id.tenant, action: id.action, key: id.key },
      expect,
      patch,
      relative: options?.relative === true,
    };
    if (tx != null) {
      const client = watched(asClient(tx));
      await this.ready();
      return (await updateAll(client, this.names, [item]))[0] as number | null;
    }
    if (this.updates) return this.updates.push(item);
    return (await updateAll(await this.ready(), this.names, [item]))[0] as number | null;
  }

  async get(id: RecordId, tx?: unknown): Promise<StoredRecord | null> {
    if (tx != null) {
      const client = watched(asClient(tx));
      await this.ready();
      return (await selectAll(client, this.names, [id])).get(idKey(id))?.record ?? null;
    }
    if (this.gets) return this.gets.push(id);
    return (await this.getBatch([id]))[0] ?? null;
  }

  /** Pages in id order from the cursor's id on, one statement a page on the pool (no transaction). */
  async list(query: RecordQuery): Promise<RecordPage> {
    const { limit } = query;
    if (!Number.isInteger(limit) || limit < 1) throw new InvalidArgumentError('limit must be a positive whole number');
    const after = query.cursor === undefined ? undefined : recordFromCursor(query.cursor);
    const list = sql.listRecords(this.names, query, after);
    const { rows } = await (await this.ready()).query(list.text, list.values);
    const records = rows.slice(0, limit).map((row) => sql.toRecord(row as sql.RecordRow));
    const last = records[records.length - 1];
    return { records, cursor: rows.length > limit && last ? recordCursor(last) : null };
  }

  async purgeExpired(now: number, limit: number): Promise<number> {
    if (!Number.isInteger(limit) || limit < 0) throw new InvalidArgumentError('purge limit must be a whole number');
    if (limit === 0) return 0;
    const purge = sql.purgeExpired(this.names, now, limit);
    return (await (await this.ready()).query(purge.text, purge.values)).rowCount ?? 0;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.given || !this.pooled) return;
    const pool = await this.pooled.catch(() => undefined);
    await pool?.end();
  }

  private pool(): Promise<PgPool> {
    if (this.given) return Promise.resolve(this.given);
    this.pooled ??= openPool(this.connectionString as string);
    return this.pooled;
  }

  /** The pool, once the schema is migrated. */
  private async ready(): Promise<PgPool> {
    if (this.closed) throw new OncelyError('CLOSED', 'this postgres store is closed');
    const pool = await this.pool();
    await this.migrate();
    return pool;
  }

  private async insertBatch(inserts: Insert[]): Promise<InsertResult[]> {
    const pool = await this.ready();
    return insertOncePerId(inserts, (unique) => insertAll(pool, this.names, unique));
  }

  private async getBatch(ids: RecordId[]): Promise<(StoredRecord | null)[]> {
    const found = await selectAll(await this.ready(), this.names, ids);
    return ids.map((id) => {
      const row = found.get(idKey(id));
      return row ? { ...row.record } : null;
    });
  }
}
