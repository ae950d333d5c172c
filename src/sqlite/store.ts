import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { type Clock, systemClock } from '../core/clock.js';
import { recordCursor, recordFromCursor } from '../core/cursor.js';
import type { Duration } from '../core/duration.js';
import { durationOption } from '../core/duration-option.js';
import { InvalidArgumentError } from '../core/errors.js';
import { absoluteRecord, type RecordId, type Settlement, type StoredRecord } from '../core/record.js';
import { GroupCommit } from '../db/group-commit.js';
import { loadSqliteDriver } from '../db/sqlite.js';
import type {
  Expectation,
  InsertResult,
  RecordPage,
  RecordPatch,
  RecordQuery,
  RecordStore,
  WriteOptions,
} from '../store.js';
import type { SqliteDatabase, SqliteStatement } from './driver.js';
import { migrateRecords } from './migrate.js';
import {
  conditionalUpdate,
  INSERT,
  INSERT_SETTLED,
  type ListShape,
  listRecords,
  listShapeKey,
  PURGE,
  SELECT,
  updateShape,
} from './sql.js';

/** Options of `sqliteStore`. */
export interface SqliteStoreOptions {
  /** Database file; ':memory:' for a private in-memory database. Default './.oncely/oncely.db'. */
  path?: string;
  /** An open better-sqlite3 Database to use instead of opening `path`; it is not closed by close(). */
  database?: SqliteDatabase;
  /** 'full' (default) survives power loss; 'normal' may lose the last commits on power loss, not on a crash. */
  durability?: 'full' | 'normal';
  /** How long a writer waits for another process's write lock. Default '5s'. */
  busyTimeout?: Duration;
  /** @deprecated Write `busyTimeout`; goes in 0.2.0. */
  busyTimeoutMs?: number;
  /** The store's clock, which judges leases and TTLs: a test's manual clock (the engine's `clock` too). Default the system clock. */
  clock?: Clock;
}

interface Statements {
  select: SqliteStatement;
  insert: SqliteStatement;
  insertSettled: SqliteStatement;
  purge: SqliteStatement;
  updates: Map<string, SqliteStatement>;
  lists: Map<string, SqliteStatement>;
}

const ID_COLUMNS = ['tenant', 'action', 'key'] as const;

const prepared = new WeakMap<SqliteDatabase, Statements>();
// Databases migrating now: the calls that arrive meanwhile wait for the one migration.
const preparing = new WeakMap<SqliteDatabase, Promise<Statements>>();

// The time fields of a patch; in a relative write each is milliseconds from the store's now. One
// host shares one SQLite file, so its clock (Date.now(), or the `clock` option) is the store's clock.
const TIMES = ['leaseUntil', 'createdAt', 'updatedAt', 'completedAt', 'expiresAt'] as const;

/** The store's connection and its group commit, once opened. */
interface Connection {
  db: SqliteDatabase;
  writes: GroupCommit;
}

/**
 * Records in an embedded SQLite file, shared safely by the processes of one host (WAL, busy
 * timeout, write lock per commit). Concurrent writes from one process are committed together
 * (group commit), so a burst pays one fsync instead of one per statement. The file is opened on
 * the first call, where better-sqlite3 is loaded: an app on another store never installs it.
 */
export class SqliteStore implements RecordStore {
  readonly kind = 'sqlite';
  private connection: Connection | undefined;
  private opening: Promise<Connection> | undefined;
  private readonly path: string | undefined;
  private readonly pragmas: string[];
  private readonly clock: Clock;

  constructor(options: SqliteStoreOptions = {}) {
    const { path = './.oncely/oncely.db', database, durability = 'full' } = options;
    const busyTimeoutMs = durationOption(options, 'busyTimeout', 'busyTimeoutMs', '5s', 'sqliteStore');
    this.clock = options.clock ?? systemClock;
    if (durability !== 'full' && durability !== 'normal')
      throw new InvalidArgumentError("durability must be 'full' or 'normal'");
    this.pragmas = [
      `busy_timeout = ${busyTimeoutMs}`,
      'journal_mode = WAL',
      `synchronous = ${durability === 'full' ? 'FULL' : 'NORMAL'}`,
    ];
    // A Database the caller opened is used at once and left open by close(); a path is opened on first use.
    this.path = database ? undefined : path;
    if (database) this.connection = this.connect(database);
    else if (path !== ':memory:' && !path.startsWith('file:')) mkdirSync(dirname(path), { recursive: true });
  }

  /** Creates or upgrades the records table now; the store also does it on first use. */
  async migrate(): Promise<void> {
    const { db } = this.connection ?? (await this.open());
    await (prepared.get(db) ?? this.prepare(db));
  }

  async insertOrGet(record: StoredRecord, tx?: unknown, options?: WriteOptions): Promise<InsertResult> {
    const own = tx === undefined ? (this.connection ?? (await this.open())) : undefined;
    const db = own ? own.db : this.target(tx);
    const s = prepared.get(db) ?? (await this.prepare(db));
    // Reading first keeps replays off the write lock; the insert below still decides who claims.
    const existing = fromRow(s.select.get(pick(record)));
    if (existing) return { inserted: false, record: existing, now: this.clock.now() };
    const { settlement } = record;
    const attempt = (): InsertResult => {
      // The times are taken when the write applies (in the group commit), not when it was queued.
      const now = this.clock.now();
      const stored = options?.relative ? absoluteRecord(record, now) : record;
      if (settlement) stored.settlement = settlement;
      const changes = settlement
        ? s.insertSettled.run(Object.assign({}, stored, { settlement: JSON.stringify(settlement) })).changes
        : s.insert.run(stored).changes;
      if (changes === 1) return { inserted: true, record: stored, now };
      const winner = fromRow(s.select.get(pick(record)));
      if (!winner) throw new Error('record vanished between insert and read');
      return { inserted: false, record: winner, now };
    };
    return own ? own.writes.push(attempt) : attempt();
  }

  async update(
    id: RecordId,
    expect: Expectation,
    patch: RecordPatch,
    tx?: unknown,
    options?: WriteOptions,
  ): Promise<number | null> {
    const own = tx === undefined ? (this.connection ?? (await this.open())) : undefined;
    const db = own ? own.db : this.target(tx);
    const statement = this.updateStatement(db, prepared.get(db) ?? (await this.prepare(db)), patch, expect);
    // Assigned rather than spread: on Node 20 a spread followed by literal members is ~100x slower.
    const params: Record<string, unknown> = Object.assign(
      { tenant: id.tenant, action: id.action, key: id.key, e_fence: expect.fence },
      patch,
    );
    if (patch.settlement) params.settlement = JSON.stringify(patch.settlement);
    expect.states.forEach((state, i) => {
      params[`e_state${i}`] = state;
    });
    if ('leaseUntil' in expect) params.e_lease = expect.leaseUntil ?? null;
    const relative = options?.relative === true;
    const attempt = (): number | null => {
      // Taken when the write applies (in the group commit): the relative times count from it.
      const now = this.clock.now();
      if (relative) {
        for (const field of TIMES) {
          const ms = params[field];
          if (typeof ms === 'number') params[field] = now + ms;
        }
      }
      return statement.run(params).changes === 1 ? now : null;
    };
    return own ? own.writes.push(attempt) : attempt();
  }

  async get(id: RecordId, tx?: unknown): Promise<StoredRecord | null> {
    const db = tx === undefined ? (this.connection ?? (await this.open())).db : this.target(tx);
    const s = prepared.get(db) ?? (await this.prepare(db));
    return fromRow(s.select.get(pick(id)));
  }

  /** Pages in id order from the cursor's id on; needs no transaction (each page is one statement). */
  async list(query: RecordQuery): Promise<RecordPage> {
    const { limit } = query;
    if (!Number.isInteger(limit) || limit < 1) throw new InvalidArgumentError('limit must be a positive whole number');
    const { db } = this.connection ?? (await this.open());
    const s = prepared.get(db) ?? (await this.prepare(db));
    const from = query.cursor === undefined ? undefined : recordFromCursor(query.cursor);
    const after = from ? cursorColumns(query, from) : [];
    if (after === null) return { records: [], cursor: null };
    const shape: ListShape = {
      state: query.state,
      tenant: query.tenant !== undefined,
      action: query.action !== undefined,
      updatedBefore: query.updatedBefore !== undefined,
      after,
    };
    const key = listShapeKey(shape);
    let statement = s.lists.get(key);
    if (!statement) {
      statement = db.prepare(listRecords(shape));
      s.lists.set(key, statement);
    }
    // One row past the page says whether another page follows, so the last page has no cursor.
    const rows = statement.all({
      tenant: query.tenant,
      action: query.action,
      updatedBefore: query.updatedBefore,
      c_tenant: from?.tenant,
      c_action: from?.action,
      c_key: from?.key,
      limit: limit + 1,
    });
    const records = rows.slice(0, limit).map((row) => fromRow(row) as StoredRecord);
    const last = records[records.length - 1];
    return { records, cursor: rows.length > limit && last ? recordCursor(last) : null };
  }

  async purgeExpired(now: number, limit: number): Promise<number> {
    const { db, writes } = this.connection ?? (await this.open());
    const s = prepared.get(db) ?? (await this.prepare(db));
    return writes.push(() => s.purge.run({ now, limit }).changes);
  }

  async close(): Promise<void> {
    // A store never used has nothing open; one opening now is closed once it is open.
    const own = this.connection ?? (await this.opening?.catch(() => undefined));
    if (!own) return;
    own.writes.flush();
    if (this.path !== undefined) own.db.close();
  }

  /** Opens the file (once, however many calls arrive meanwhile); a failed open is tried again by the next call. */
  private open(): Promise<Connection> {
    if (!this.opening) {
      const path = this.path as string;
      this.opening = loadSqliteDriver('the SQLite store').then((Database) => {
        this.connection = this.connect(new Database(path) as unknown as SqliteDatabase);
        return this.connection;
      });
      this.opening.catch(() => {
        this.opening = undefined;
      });
    }
    return this.opening;
  }

  private connect(db: SqliteDatabase): Connection {
    for (const pragma of this.pragmas) db.pragma(pragma);
    return { db, writes: new GroupCommit(db) };
  }

  /** A caller's open transaction, checked; the store's own connection is not opened for it. */
  private target(tx: unknown): SqliteDatabase {
    const db = tx as SqliteDatabase;
    if (typeof db?.prepare !== 'function' || typeof db.inTransaction !== 'boolean')
      throw new InvalidArgumentError('tx must be a better-sqlite3 Database with an open transaction');
    if (!db.inTransaction) throw new InvalidArgumentError('tx must have an open transaction (call BEGIN first)');
    return db;
  }

  /**
   * The statements of `db`, once its records table is migrated (on first use, so a store built on
   * the host's connection leaves the migration to the host's migrate).
   */
  private prepare(db: SqliteDatabase): Promise<Statements> {
    let ready = preparing.get(db);
    if (!ready) {
      ready = migrateRecords(db).then(() => {
        const s = {
          select: db.prepare(SELECT),
          insert: db.prepare(INSERT),
          insertSettled: db.prepare(INSERT_SETTLED),
          purge: db.prepare(PURGE),
          updates: new Map(),
          lists: new Map(),
        };
        prepared.set(db, s);
        return s;
      });
      // A failed migration is tried again by the next call, as a store made while the file was locked should work once it is free.
      ready.catch(() => preparing.delete(db));
      preparing.set(db, ready);
    }
    return ready;
  }

  private updateStatement(db: SqliteDatabase, s: Statements, patch: RecordPatch, expect: Expectation): SqliteStatement {
    const shape = updateShape(patch, expect);
    let statement = s.updates.get(shape);
    if (!statement) {
      statement = db.prepare(conditionalUpdate(patch, expect));
      s.updates.set(shape, statement);
    }
    return statement;
  }
}

function pick(id: RecordId): RecordId {
  return { tenant: id.tenant, action: id.action, key: id.key };
}

/** A row as SELECT reads it, its settlement JSON decoded, or dropped when there is none. */
function fromRow(row: unknown): StoredRecord | null {
  if (!row) return null;
  const record = row as Omit<StoredRecord, 'settlement'> & { settlement?: string | Settlement | null };
  if (record.settlement === null) delete record.settlement;
  else if (typeof record.settlement === 'string') record.settlement = JSON.parse(record.settlement) as Settlement;
  return record as StoredRecord;
}

/**
 * The id columns a cursor condition compares, given the filters: a tenant (and then an action)
 * filter fixes those columns, so the cursor compares the rest and the index range starts there. A
 * cursor from outside the fixed range (another listing's) starts at its beginning ([]) or past its
 * end (null: no record). Text compares as the columns do: SQLite's BINARY, bytes of UTF-8.
 */
function cursorColumns(query: RecordQuery, from: RecordId): ListShape['after'] | null {
  const fixed: [keyof RecordId, string][] = [];
  if (query.tenant !== undefined) {
    fixed.push(['tenant', query.tenant]);
    if (query.action !== undefined) fixed.push(['action', query.action]);
  }
  for (const [column, value] of fixed) {
    const order = Buffer.compare(Buffer.from(from[column]), Buffer.from(value));
    if (order < 0) return [];
    if (order > 0) return null;
  }
  return ID_COLUMNS.slice(fixed.length);
}
