import { randomBytes } from 'node:crypto';
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
import type { MysqlConnection, MysqlPool, MysqlQueryable } from './driver.js';
import { migrate } from './migrate.js';
import * as sql from './sql.js';

/** Where the records live, and whether concurrent calls share statements. */
export interface MysqlLayout {
  /** Database of the records and the migration ledger, created when missing. Default: the connection's own. */
  database?: string;
  /** Table of the records. Default 'oncely_records'. */
  table?: string;
  /** Coalesce concurrent calls (outside a caller's transaction) into multi-row statements. Default true. */
  batch?: boolean;
}

/** Options of mysqlStore: a connection URI (the store owns its pool) or your mysql2/promise pool, and a layout. */
export type MysqlStoreOptions = ({ uri: string; pool?: undefined } | { pool: MysqlPool; uri?: undefined }) &
  MysqlLayout;

/** Most items in one batched statement. */
const MAX_BATCH = 500;
/** Claim and read batches in flight at once, each on a connection of the pool. */
const MAX_IN_FLIGHT = 4;
/** Rounds of insert-then-read before giving up on a key whose record keeps vanishing (purged meanwhile). */
const MAX_INSERT_ROUNDS = 50;
/** Times a statement of the store's own that InnoDB chose as a deadlock victim (or timed out on a lock) is run again. */
const MAX_LOCK_RETRIES = 5;

const sqlState = (error: unknown): string | undefined => {
  const state = (error as { sqlState?: unknown } | null)?.sqlState;
  return typeof state === 'string' ? state : undefined;
};

// Data and constraint errors (SQLSTATE classes 22 and 23) belong to one item: retry its batch item by item.
const isItemError = (error: unknown): boolean => dataRefusal(error) !== undefined;

// ER_LOCK_DEADLOCK and ER_LOCK_WAIT_TIMEOUT: InnoDB rolled the statement (or its transaction) back; it may be run again.
const isLockConflict = (error: unknown): boolean => {
  const errno = (error as { errno?: unknown } | null)?.errno;
  return errno === 1213 || errno === 1205;
};

/** Runs `work` again while InnoDB picks it as a deadlock victim: only for work of the store's own, never a caller's transaction. */
async function retryingLocks<T>(work: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await work();
    } catch (error) {
      if (attempt >= MAX_LOCK_RETRIES || !isLockConflict(error)) throw error;
    }
  }
}

const rowsOf = async (db: MysqlQueryable, query: sql.Query): Promise<unknown[]> =>
  (await db.query(query.text, query.values))[0] as unknown[];

/** A stored record as read, with whether the reading statement's token inserted it, and the clock's now. */
interface Found {
  record: StoredRecord;
  mine: boolean;
  now: number;
}

/** Reads the records of some ids; answers by id key. */
async function selectAll(
  db: MysqlQueryable,
  n: sql.Names,
  ids: RecordId[],
  token: Buffer | null,
  locking: boolean,
): Promise<Map<string, Found>> {
  return foundRows((await rowsOf(db, sql.selectMany(n, ids, token, locking))) as SelectedRow[]);
}

/** A row of selectMany. */
type SelectedRow = sql.RecordRow & { mine: number | null; written_at: number | string | null; now: number | string };

/** selectMany's rows by id key; a record the token wrote answers with the clock it was written at. */
function foundRows(rows: SelectedRow[]): Map<string, Found> {
  const found = new Map<string, Found>();
  for (const row of rows) {
    const record = sql.toRecord(row);
    const mine = Number(row.mine) === 1;
    found.set(idKey(record), { record, mine, now: Number(mine ? row.written_at : row.now) });
  }
  return found;
}

/**
 * Runs statements in order on `db` and answers each one's result: in one round trip when `script`
 * (the store's own pool, opened with multipleStatements), else one by one.
 */
async function runAll(db: MysqlQueryable, queries: sql.Query[], script: boolean): Promise<unknown[]> {
  if (script && queries.length > 1) {
    const [results] = await db.query(
      queries.map((q) => q.text).join(';\n'),
      queries.flatMap((q) => q.values),
    );
    return results as unknown[];
  }
  const results: unknown[] = [];
  for (const q of queries) results.push((await db.query(q.text, q.values))[0]);
  return results;
}

const BEGIN: sql.Query = { text: 'START TRANSACTION', values: [] };
const COMMIT: sql.Query = { text: 'COMMIT', values: [] };

/** Inserts records with distinct ids unless present; answers by id key. `locking`: inside a caller's transaction. */
function insertAll(
  db: MysqlQueryable,
  n: sql.Names,
  inserts: Insert[],
  locking: boolean,
  script: boolean,
): Promise<Map<string, InsertResult>> {
  return insertByTimes(inserts, (some) => insertSome(db, n, some, locking, script));
}

/**
 * Inserts records with distinct ids, all relative or all absolute, unless present. MySQL answers
 * an insert with a count only, so each statement marks its rows with a random token and a read
 * after it tells the rows it inserted from those that were there.
 */
async function insertSome(
  db: MysqlQueryable,
  n: sql.Names,
  inserts: Insert[],
  locking: boolean,
  script: boolean,
): Promise<Map<string, InsertResult>> {
  const answers = new Map<string, InsertResult>();
  // One id order for every process: overlapping batches then wait on each other instead of deadlocking.
  let pending = inserts.length > 1 ? [...inserts].sort((a, b) => compareIds(a.record, b.record)) : inserts;
  for (let round = 0; pending.length > 0; round++) {
    if (round === MAX_INSERT_ROUNDS)
      throw new Error(`record of key "${pending[0]?.record.key}" vanished ${round} times`);
    const relative = (pending[0] as Insert).relative;
    const token = randomBytes(16);
    const records = pending.map((p) => p.record);
    const read = sql.selectMany(n, records, token, locking);
    // In one script the clock is read once for the statement, not once per row and time (sql.setNow).
    const statements = script
      ? [sql.setNow, sql.insertMany(n, records, relative, token, sql.NOW), read]
      : [sql.insertMany(n, records, relative, token), read];
    // Outside a caller's transaction the insert commits on its own: safe to run again when InnoDB refused it.
    const run = () => runAll(db, statements, script);
    const found = foundRows((await (locking ? run() : retryingLocks(run)))[statements.length - 1] as SelectedRow[]);
    // A row purged between the insert and the read is inserted again.
    pending = pending.filter((p) => {
      const row = found.get(idKey(p.record));
      if (!row) return true;
      if (!row.mine) answers.set(idKey(p.record), { inserted: false, record: row.record, now: row.now });
      else {
        const now = row.now;
        answers.set(idKey(p.record), {
          inserted: true,
          record: relative ? absoluteRecord(p.record, now) : { ...p.record },
          now,
        });
      }
      return false;
    });
  }
  return answers;
}

const spread = (query: sql.Query): [string, unknown[]] => [query.text, query.values];

type UpdateItem = sql.UpdateItem;

/**
 * Applies conditional writes with distinct ids: one UPDATE per tenant and action, then a read of
 * the rows they marked (see sql.updateMany). `own`: in a transaction of the store's own around
 * them, so the read sees exactly the rows the UPDATE wrote, still locked; else the caller's
 * transaction does that. `script` (own only, on a connection that takes several statements): the
 * whole transaction is one round trip, its clock read once (sql.setNow), so its rows stay locked
 * only while the server runs it, not across a round trip per statement.
 * Answers in item order: the clock's now each applied at, or null.
 */
async function updateAll(
  db: MysqlQueryable,
  n: sql.Names,
  items: UpdateItem[],
  own: boolean,
  script = false,
): Promise<(number | null)[]> {
  const token = randomBytes(16);
  const scripted = own && script;
  const ids = items.map((item) => item.id);
  const statements = scripted
    ? [sql.setNow, ...sql.updateMany(n, items, token, sql.NOW), sql.writtenBy(n, ids, token)]
    : [...sql.updateMany(n, items, token), sql.writtenBy(n, ids, token)];
  // A script that stops halfway (an error) leaves its transaction open on the connection: the
  // caller (updateBatch) rolls it back or drops the connection before anyone else uses it.
  const results = await runAll(db, own ? [BEGIN, ...statements, COMMIT] : statements, scripted);
  const written = new Map<string, number>();
  // The read is the last statement before the COMMIT.
  for (const row of results[own ? statements.length : statements.length - 1] as (sql.RecordRow & {
    written_at: number | string;
  })[])
    written.set(idKey(sql.rowId(row)), Number(row.written_at));
  return items.map((item) => written.get(idKey(item.id)) ?? null);
}

/** Loads the optional mysql2 driver and opens a pool the store owns. */
async function openPool(uri: string): Promise<MysqlPool> {
  const mysql = await loadPeer(() => import('mysql2/promise'), 'mysqlStore({ uri })', ['mysql2']);
  // utf8mb4 on the wire: keys are stored as their UTF-8 bytes.
  // Statements of one batch go in one round trip (see runAll); every value is still escaped by mysql2.
  return mysql.createPool({
    uri,
    connectionLimit: 10,
    charset: 'utf8mb4',
    multipleStatements: true,
  }) as unknown as MysqlPool;
}

/** Whether a pool's connections take several statements at once (mysql2's multipleStatements). */
async function takesScripts(pool: MysqlPool): Promise<boolean> {
  try {
    await pool.query('SELECT 1; SELECT 1');
    return true;
  } catch (error) {
    // ER_PARSE_ERROR: the server saw one statement with text after it.
    if ((error as { errno?: unknown }).errno === 1064) return false;
    throw error;
  }
}

// Connections given as `tx` that carry the store's 'error' listener, so it is added once per connection.
const listening = new WeakSet<object>();

function ignoreConnectionError(): void {
  // The next statement on the connection fails with the loss, which is how its caller hears of it.
}

/**
 * Checks that `tx` looks like a mysql2 connection in a transaction. A standalone mysql2 connection
 * whose server connection dies while idle (KILL, a restart) emits 'error', and with no listener
 * that ends the process: the store adds one.
 */
function asConnection(tx: unknown): MysqlQueryable {
  if (typeof tx !== 'object' || tx === null || typeof (tx as MysqlQueryable).query !== 'function')
    throw new InvalidArgumentError('tx must be a mysql2 connection on which you ran beginTransaction()');
  // A pool would run each statement on some connection outside the caller's transaction.
  if ('getConnection' in tx)
    throw new InvalidArgumentError(
      'tx must be a connection from pool.getConnection() on which you ran beginTransaction(), not the pool',
    );
  const emitter = tx as MysqlConnection;
  if (typeof emitter.on === 'function' && !listening.has(tx)) {
    listening.add(tx);
    emitter.on('error', ignoreConnectionError);
  }
  return tx as MysqlQueryable;
}

/**
 * A record store on MySQL 8 or MariaDB 10.5 and later (InnoDB). The table is created on first use
 * (or by `migrate()`); concurrent calls share multi-row statements unless `batch: false`. Pass
 * `tx` (a connection after beginTransaction()) to make a record commit or roll back with your own
 * writes; the first use migrates on another connection of the pool, so with a one-connection pool
 * call `migrate()` first.
 */
export class MysqlStore implements RecordStore {
  readonly kind = 'mysql';
  private readonly names: sql.Names;
  private readonly given: MysqlPool | undefined;
  private readonly uri: string | undefined;
  /** The pool takes a claim and its read in one round trip: the store's own, or yours if made with multipleStatements. */
  private scripts = false;
  private pooled: Promise<MysqlPool> | undefined;
  private migrated: Promise<void> | undefined;
  private closed = false;
  private readonly inserts: Batcher<Insert, InsertResult> | undefined;
  private readonly updates: Batcher<UpdateItem, number | null> | undefined;
  private readonly gets: Batcher<RecordId, StoredRecord | null> | undefined;

  constructor(options: MysqlStoreOptions) {
    const { database, table = 'oncely_records', batch = true } = options;
    if (options.pool === undefined && typeof options.uri !== 'string')
      throw new InvalidArgumentError('mysqlStore needs a uri or a pool');
    if (
      options.pool !== undefined &&
      (typeof options.pool.query !== 'function' || typeof options.pool.getConnection !== 'function')
    )
      throw new InvalidArgumentError('mysqlStore pool must be a mysql2/promise Pool (with query and getConnection)');
    this.given = options.pool;
    // A malformed URI fails here, not as a DNS error at the first call.
    if (options.uri !== undefined) checkUrl(options.uri, 'mysqlStore uri');
    this.uri = options.uri;
    this.names = sql.names(database, table);
    if (!batch) return;
    const batching = { maxBatch: MAX_BATCH, isolate: isItemError };
    // Claims and reads of several batches may be in flight at once, each on a connection: InnoDB
    // commits concurrent statements with one log flush, and callers stop moving in lockstep behind
    // one statement. Writes go one batch at a time, in the order they were made.
    const overlapping = { ...batching, maxInFlight: MAX_IN_FLIGHT };
    this.inserts = new Batcher((inserts) => this.insertBatch(inserts), overlapping);
    // Two writes to one id in one statement would both check the same old row; the second waits its turn.
    this.updates = new Batcher((items) => this.updateBatch(items), { ...batching, distinct: (item) => idKey(item.id) });
    this.gets = new Batcher((ids) => this.getBatch(ids), overlapping);
  }

  /** Creates or upgrades the table; memoized, and retried on the next call when it failed. */
  migrate(): Promise<void> {
    this.migrated ??= this.pool()
      .then(async (pool) => {
        await migrate(pool, this.names);
        this.scripts = this.given === undefined || (await takesScripts(pool));
      })
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
      const connection = asConnection(tx);
      await this.ready();
      return (await insertAll(connection, this.names, [insert], true, false)).get(idKey(record)) as InsertResult;
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
      const connection = asConnection(tx);
      await this.ready();
      return (await updateAll(connection, this.names, [item], false))[0] as number | null;
    }
    if (this.updates) return this.updates.push(item);
    return (await this.updateBatch([item]))[0] as number | null;
  }

  async get(id: RecordId, tx?: unknown): Promise<StoredRecord | null> {
    if (tx != null) {
      const connection = asConnection(tx);
      await this.ready();
      return (await selectAll(connection, this.names, [id], null, false)).get(idKey(id))?.record ?? null;
    }
    if (this.gets) return this.gets.push(id);
    return (await this.getBatch([id]))[0] ?? null;
  }

  /** Pages in id order from the cursor's id on, one statement a page on the pool (no transaction). */
  async list(query: RecordQuery): Promise<RecordPage> {
    const { limit } = query;
    if (!Number.isInteger(limit) || limit < 1) throw new InvalidArgumentError('limit must be a positive whole number');
    const after = query.cursor === undefined ? undefined : recordFromCursor(query.cursor);
    const rows = await rowsOf(await this.ready(), sql.listRecords(this.names, query, after));
    const records = rows.slice(0, limit).map((row) => sql.toRecord(row as sql.RecordRow));
    const last = records[records.length - 1];
    return { records, cursor: rows.length > limit && last ? recordCursor(last) : null };
  }

  async purgeExpired(now: number, limit: number): Promise<number> {
    if (!Number.isInteger(limit) || limit < 0) throw new InvalidArgumentError('purge limit must be a whole number');
    if (limit === 0) return 0;
    const pool = await this.ready();
    const [result] = await retryingLocks(() => pool.query(...spread(sql.purgeExpired(this.names, now, limit))));
    return (result as { affectedRows: number }).affectedRows;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.given || !this.pooled) return;
    const pool = await this.pooled.catch(() => undefined);
    await pool?.end();
  }

  private pool(): Promise<MysqlPool> {
    if (this.given) return Promise.resolve(this.given);
    this.pooled ??= openPool(this.uri as string);
    return this.pooled;
  }

  /** The pool, once the table is migrated. */
  private async ready(): Promise<MysqlPool> {
    if (this.closed) throw new OncelyError('CLOSED', 'this mysql store is closed');
    const pool = await this.pool();
    await this.migrate();
    return pool;
  }

  private async insertBatch(inserts: Insert[]): Promise<InsertResult[]> {
    const pool = await this.ready();
    return insertOncePerId(inserts, (unique) => insertAll(pool, this.names, unique, false, this.scripts));
  }

  private async updateBatch(items: UpdateItem[]): Promise<(number | null)[]> {
    const pool = await this.ready();
    // A transaction InnoDB rolled back (a deadlock victim) is run again whole.
    return retryingLocks(async () => {
      const connection = await pool.getConnection();
      let lost = false;
      try {
        return await updateAll(connection, this.names, items, true, this.scripts);
      } catch (error) {
        // A statement error leaves the connection usable; anything else (no SQLSTATE: a lost connection) does not.
        lost = sqlState(error) === undefined;
        if (!lost) await connection.query('ROLLBACK').catch(() => (lost = true));
        throw error;
      } finally {
        if (lost && typeof connection.destroy === 'function') connection.destroy();
        else connection.release();
      }
    });
  }

  private async getBatch(ids: RecordId[]): Promise<(StoredRecord | null)[]> {
    const found = await selectAll(await this.ready(), this.names, ids, null, false);
    return ids.map((id) => {
      const row = found.get(idKey(id));
      return row ? { ...row.record } : null;
    });
  }
}
