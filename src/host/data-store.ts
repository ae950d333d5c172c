import { dataRefusal } from '../db/refusal.js';
import type { Sql } from '../db/types.js';
import { Operator } from './operators.js';
import { type AppSchema, type ColumnSchema, findTable, quoteIdent, type TableSchema } from './schema.js';
import type { Count } from './totals.js';
import type { DataStore, Result } from './types.js';
import { decodeRow, encode, Refusal } from './values.js';
import { columnOf, orderSql, whereSql } from './where.js';

/** Options of createDataStore. */
export interface DataStoreOptions {
  /** The clock of `created_at`/`updated_at`, in epoch ms. */
  now?: () => number;
  /**
   * On PostgreSQL, run each write under a savepoint so that a refused write (a constraint) leaves the
   * caller's transaction usable, as it is on SQLite. Default true; dropped by itself outside a transaction.
   */
  savepoints?: boolean;
  /** Counts in the caller's transaction: applyVersion's outcomes (`oncely_versions_total`, the stale drop rate). */
  count?: Count;
}

/** The most rows `find` returns, and its default limit. */
export const FIND_LIMIT = 10_000;

const RESERVED = new Set(['created_at', 'updated_at']);
const SAVEPOINT = 'oncely_store';

type Row = Record<string, unknown>;
type Values = Map<ColumnSchema, unknown>;

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Maps a database error caused by the caller's data to a refusal; anything else is a bug and is rethrown. */
function refusalOf(error: unknown): Refusal | undefined {
  if (!(error instanceof Error)) return undefined;
  const code = (error as { code?: unknown }).code;
  if (typeof code !== 'string') return undefined;
  const detail = (error as { detail?: unknown }).detail;
  const message = typeof detail === 'string' && detail !== '' ? `${error.message} (${detail})` : error.message;
  if (code === '42P10' || /ON CONFLICT clause does not match/.test(error.message)) {
    return new Refusal('UNIQUE_REQUIRED', message);
  }
  const refused = dataRefusal(error);
  if (refused === 'constraint') return new Refusal('CONSTRAINT_VIOLATION', message);
  if (refused === 'value') return new Refusal('VALUE_INVALID', message);
  return undefined;
}

/**
 * The data primitives of one transaction (`ctx.store`): tables and columns are checked against
 * `schema`, so no caller input ever becomes an SQL identifier; names are camelCase in JS and
 * snake_case in SQL; expected failures come back as `{ ok: false, error: { code, message } }`.
 * @example
 * const store = createDataStore(tx, await readSchema(db));
 * const r = await store.update('orders', { id: 'O-1', status: 'paid' }, { status: 'shipped' });
 * if (r.ok && r.data.affected === 1) notifyShipping();
 */
export function createDataStore(tx: Sql, schema: AppSchema, options: DataStoreOptions = {}): DataStore {
  const { now = Date.now } = options;
  const { dialect } = schema;
  let savepoints = dialect === 'postgres' && options.savepoints !== false;
  const prefix = schema.namespace === null ? '' : `${quoteIdent(schema.namespace)}.`;

  // A transaction's connection does one thing at a time; savepoints must not interleave.
  let turn: Promise<unknown> = Promise.resolve();
  function call<T>(fn: () => Promise<T>): Promise<Result<T>> {
    const next = turn.then(async (): Promise<Result<T>> => {
      try {
        return { ok: true, data: await fn() };
      } catch (error) {
        const refusal = error instanceof Refusal ? error : refusalOf(error);
        if (!refusal) throw error;
        return { ok: false, error: { code: refusal.code, message: refusal.message } };
      }
    });
    turn = next.catch(() => undefined);
    return next;
  }

  async function write<T>(fn: () => Promise<T>): Promise<T> {
    if (savepoints) {
      try {
        await tx.run(`SAVEPOINT ${SAVEPOINT}`);
      } catch (error) {
        // 25P01: not in a transaction block, so there is nothing to protect.
        if ((error as { code?: unknown }).code !== '25P01') throw error;
        savepoints = false;
      }
    }
    if (!savepoints) return fn();
    try {
      const result = await fn();
      await tx.run(`RELEASE SAVEPOINT ${SAVEPOINT}`);
      return result;
    } catch (error) {
      await tx.run(`ROLLBACK TO SAVEPOINT ${SAVEPOINT}`);
      await tx.run(`RELEASE SAVEPOINT ${SAVEPOINT}`);
      throw error;
    }
  }

  function tableOf(name: unknown): TableSchema {
    const table = typeof name === 'string' ? findTable(schema, name) : undefined;
    if (!table) throw new Refusal('TABLE_UNKNOWN', `no table ${JSON.stringify(name)} in the app schema`);
    return table;
  }

  const target = (table: TableSchema) => prefix + quoteIdent(table.name);

  /** Encodes the caller's fields; undefined values are dropped, host-kept columns refused. */
  function values(table: TableSchema, fields: unknown, what: string, reserved?: string): Values {
    if (!isRecord(fields)) throw new Refusal('VALUE_INVALID', `${what} must be an object`);
    const out: Values = new Map();
    for (const key of Object.keys(fields)) {
      const value = fields[key];
      if (value === undefined) continue;
      const column = columnOf(table, key);
      if (RESERVED.has(column.name)) {
        throw new Refusal('FIELD_RESERVED', `${column.name} is kept by the host and cannot be set`);
      }
      if (column.name === reserved) {
        throw new Refusal('FIELD_RESERVED', `${column.name} is set from applyVersion's version argument`);
      }
      if (column.generated) throw new Refusal('FIELD_RESERVED', `${column.name} is generated by the database`);
      if (out.has(column)) throw new Refusal('VALUE_INVALID', `${what} names ${column.name} twice`);
      out.set(column, encode(column, value, dialect));
    }
    return out;
  }

  function stamp(table: TableSchema, out: Values, names: readonly string[], ms = now()): void {
    for (const name of names) {
      const column = table.columns.get(name);
      if (column) out.set(column, encode(column, new Date(ms), dialect));
    }
  }

  /** The columns of `set` in table order, so the same shape of call gives the same SQL text. */
  function ordered(table: TableSchema, set: Values): [ColumnSchema, unknown][] {
    const out: [ColumnSchema, unknown][] = [];
    for (const column of table.columns.values()) if (set.has(column)) out.push([column, set.get(column)]);
    return out;
  }

  /** The unique set of the table that `keys` name exactly, or a UNIQUE_REQUIRED refusal. */
  function uniqueKey(table: TableSchema, keys: Values, what: string): [ColumnSchema, unknown][] {
    const key = ordered(table, keys);
    if (key.length === 0) throw new Refusal('VALUE_INVALID', `${what} names no column`);
    for (const [column, value] of key) {
      if (value === null)
        throw new Refusal('VALUE_INVALID', `${what}: ${column.name} is null and cannot identify a row`);
    }
    const names = key.map(([c]) => c.name);
    const unique = table.uniqueSets.some((set) => set.length === names.length && set.every((n) => names.includes(n)));
    if (!unique) {
      throw new Refusal(
        'UNIQUE_REQUIRED',
        `${what} (${names.join(', ')}) is not the primary key or a unique index of ${table.name}`,
      );
    }
    return key;
  }

  const keyWhere = (key: [ColumnSchema, unknown][]) => key.map(([c]) => `${quoteIdent(c.name)} = ?`).join(' AND ');

  async function selectOne(table: TableSchema, whereText: string, params: unknown[]): Promise<Row | null> {
    const rows = await tx.all<Row>(`SELECT * FROM ${target(table)} WHERE ${whereText} LIMIT 1`, params);
    return rows[0] ? decodeRow(table, rows[0], dialect) : null;
  }

  function insertSql(table: TableSchema, columns: [ColumnSchema, unknown][], alias = ''): string {
    const names = columns.map(([c]) => quoteIdent(c.name)).join(', ');
    const marks = columns.map(() => '?').join(', ');
    return `INSERT INTO ${target(table)}${alias} (${names}) VALUES (${marks})`;
  }

  return {
    createIfAbsent: (tableName, record, uniqueBy) =>
      call(async () => {
        const table = tableOf(tableName);
        const set = values(table, record, 'record');
        if (!Array.isArray(uniqueBy) || uniqueBy.length === 0) {
          throw new Refusal('UNIQUE_REQUIRED', 'uniqueBy names the columns of a unique index');
        }
        const keys: Values = new Map();
        for (const name of uniqueBy) {
          const column = columnOf(table, String(name));
          if (!set.has(column))
            throw new Refusal('VALUE_INVALID', `record has no value for uniqueBy column ${column.name}`);
          keys.set(column, set.get(column));
        }
        const key = uniqueKey(table, keys, 'uniqueBy');
        stamp(table, set, ['created_at', 'updated_at']);
        const columns = ordered(table, set);
        const conflict = key.map(([c]) => quoteIdent(c.name)).join(', ');
        const text = `${insertSql(table, columns)} ON CONFLICT (${conflict}) DO NOTHING RETURNING *`;
        const params = columns.map(([, v]) => v);
        const keyParams = key.map(([, v]) => v);
        // The existing row can vanish between the two statements (a concurrent delete): try again.
        for (let attempt = 0; attempt < 3; attempt++) {
          const inserted = await write(() => tx.all<Row>(text, params));
          if (inserted[0]) return { record: decodeRow(table, inserted[0], dialect), created: true };
          const existing = await selectOne(table, keyWhere(key), keyParams);
          if (existing) return { record: existing, created: false };
        }
        throw new Error(`createIfAbsent(${table.name}): the conflicting row keeps disappearing`);
      }),

    update: (tableName, where, patch) =>
      call(async () => {
        const table = tableOf(tableName);
        if (!isRecord(patch)) throw new Refusal('VALUE_INVALID', 'patch must be an object');
        // `op.increment(n)` changes a number relative to its stored value, in the statement itself,
        // so concurrent writers (stock, balances) never lose each other's changes. Only `op` builds
        // one: a plain `{ increment: n }` from a request body is a value, and a scalar column refuses it.
        const relative: [ColumnSchema, unknown][] = [];
        const plain: Record<string, unknown> = {};
        for (const [name, value] of Object.entries(patch)) {
          const parts = Operator.partsOf(value);
          if (parts === undefined) {
            plain[name] = value;
            continue;
          }
          const column = columnOf(table, name);
          const step = parts.length === 1 && parts[0]?.kind === 'increment' ? parts[0].value : undefined;
          if (step === undefined)
            throw new Refusal('VALUE_INVALID', `patch.${name}: op.increment is the only patch operator`);
          if (
            !['integer', 'real', 'numeric'].includes(column.kind) ||
            (typeof step !== 'number' && typeof step !== 'bigint')
          ) {
            throw new Refusal('VALUE_INVALID', `patch.${name}: op.increment needs a number and a numeric column`);
          }
          // The column's own checks: an integer column takes whole steps in its range, on SQLite too.
          relative.push([column, encode(column, step, dialect)]);
        }
        const set = values(table, plain, 'patch');
        const condition = whereSql(table, where, dialect);
        if (condition.sql === '')
          throw new Refusal('WHERE_REQUIRED', 'update needs a where with at least one condition');
        if (set.size === 0 && relative.length === 0) throw new Refusal('VALUE_INVALID', 'patch sets no column');
        stamp(table, set, ['updated_at']);
        const columns = ordered(table, set);
        const assignments = [
          ...columns.map(([c]) => `${quoteIdent(c.name)} = ?`),
          ...relative.map(([c]) => `${quoteIdent(c.name)} = ${quoteIdent(c.name)} + ?`),
        ].join(', ');
        const text = `UPDATE ${target(table)} SET ${assignments} WHERE ${condition.sql}`;
        const params = [...columns.map(([, v]) => v), ...relative.map(([, step]) => step), ...condition.params];
        return { affected: await write(() => tx.run(text, params)) };
      }),

    applyVersion: (tableName, keyFields, version, patch) =>
      call(async () => {
        const table = tableOf(tableName);
        const versionColumn = table.columns.get('version');
        if (!versionColumn) throw new Refusal('VERSION_COLUMN_REQUIRED', `table ${table.name} has no version column`);
        if (!Number.isSafeInteger(version)) throw new Refusal('VALUE_INVALID', 'version must be an integer');
        const key = uniqueKey(table, values(table, keyFields, 'keyFields', 'version'), 'keyFields');
        const changes = values(table, patch, 'patch', 'version');
        for (const [column] of key) {
          if (changes.has(column)) throw new Refusal('VALUE_INVALID', `patch sets key column ${column.name}`);
        }
        changes.set(versionColumn, encode(versionColumn, version, dialect));
        const ms = now();
        stamp(table, changes, ['updated_at'], ms);
        const row: Values = new Map([...key, ...changes]);
        stamp(table, row, ['created_at'], ms);
        const insert = ordered(table, row);
        const update = ordered(table, changes);
        const v = quoteIdent('version');
        const newer = `(cur.${v} IS NULL OR cur.${v} < excluded.${v})`;
        const full = [...table.columns.values()].every((c) => row.has(c) || c.nullable || c.hasDefault || c.generated);
        const outcome = await write(async (): Promise<{ applied: true } | { applied: false; reason: 'stale' }> => {
          if (full) {
            // The row can be created from this call alone: one atomic upsert.
            const assignments = update.map(([c]) => `${quoteIdent(c.name)} = excluded.${quoteIdent(c.name)}`);
            const conflict = key.map(([c]) => quoteIdent(c.name)).join(', ');
            const text = `${insertSql(table, insert, ' AS cur')} ON CONFLICT (${conflict}) DO UPDATE SET ${assignments.join(', ')} WHERE ${newer} RETURNING 1 AS applied`;
            const rows = await tx.all(
              text,
              insert.map(([, value]) => value),
            );
            return rows.length > 0 ? { applied: true } : { applied: false, reason: 'stale' };
          }
          // A partial patch can only update an existing row (an insert would break NOT NULL columns).
          const assignments = update.map(([c]) => `${quoteIdent(c.name)} = ?`).join(', ');
          const text = `UPDATE ${target(table)} SET ${assignments} WHERE ${keyWhere(key)} AND (${v} IS NULL OR ${v} < ?)`;
          const keyParams = key.map(([, value]) => value);
          const params = [...update.map(([, value]) => value), ...keyParams, changes.get(versionColumn)];
          if ((await tx.run(text, params)) > 0) return { applied: true };
          if (await selectOne(table, keyWhere(key), keyParams)) return { applied: false, reason: 'stale' };
          // Absent: the insert reports which required column is missing as a CONSTRAINT_VIOLATION.
          await tx.run(
            insertSql(table, insert),
            insert.map(([, value]) => value),
          );
          return { applied: true };
        });
        await options.count?.('oncely_versions_total', [table.name, outcome.applied ? 'applied' : 'stale']);
        return outcome;
      }),

    get: (tableName, where) =>
      call(async () => {
        const table = tableOf(tableName);
        const condition = whereSql(table, where, dialect);
        const filter = condition.sql === '' ? '' : ` WHERE ${condition.sql}`;
        const rows = await tx.all<Row>(`SELECT * FROM ${target(table)}${filter} LIMIT 1`, condition.params);
        return rows[0] ? decodeRow(table, rows[0], dialect) : null;
      }),

    find: (tableName, where, findOptions = {}) =>
      call(async () => {
        const table = tableOf(tableName);
        const condition = whereSql(table, where, dialect);
        const { limit = FIND_LIMIT, orderBy } = findOptions;
        if (!Number.isSafeInteger(limit) || limit < 1 || limit > FIND_LIMIT) {
          throw new Refusal('VALUE_INVALID', `limit must be an integer from 1 to ${FIND_LIMIT}`);
        }
        const filter = condition.sql === '' ? '' : ` WHERE ${condition.sql}`;
        const order = orderSql(table, orderBy, dialect);
        const rows = await tx.all<Row>(`SELECT * FROM ${target(table)}${filter}${order} LIMIT ?`, [
          ...condition.params,
          limit,
        ]);
        return rows.map((row) => decodeRow(table, row, dialect));
      }),
  };
}
