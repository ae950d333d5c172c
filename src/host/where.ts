import type { Sql } from '../db/types.js';
import { Operator, type OperatorPart } from './operators.js';
import { type ColumnSchema, findColumn, quoteIdent, type TableSchema } from './schema.js';
import type { Where } from './types.js';
import { encode, Refusal } from './values.js';

/** A piece of SQL text with its `?` parameters. */
export interface Fragment {
  sql: string;
  params: unknown[];
}

/** The most values `op.in` takes: the list is one parameter, but its size is the caller's input. */
export const IN_LIST_MAX = 1_000;

const COMPARISONS: Partial<Record<OperatorPart['kind'], string>> = { lt: '<', lte: '<=', gt: '>', gte: '>=' };

export function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** The column a caller names, or a COLUMN_UNKNOWN refusal naming it. */
export function columnOf(table: TableSchema, name: string): ColumnSchema {
  const column = findColumn(table, name);
  if (!column) throw new Refusal('COLUMN_UNKNOWN', `table ${table.name} has no column ${JSON.stringify(name)}`);
  return column;
}

function refuse(column: ColumnSchema, why: string): never {
  throw new Refusal('WHERE_INVALID', `where.${column.name}: ${why}`);
}

function operand(column: ColumnSchema, value: unknown, dialect: Sql['dialect']): unknown {
  if (value === undefined) refuse(column, 'undefined is not a value (use op.isNull() to match NULL)');
  // JSON has no equality the two dialects share (key order, json vs jsonb): only NULL tests.
  if (column.kind === 'json') refuse(column, 'a JSON column can only be tested with op.isNull() or op.notNull()');
  // A plain object or array here is the caller's value, checked like any other: refused by
  // scalar columns, never read as operators.
  return encode(column, value, dialect);
}

/**
 * The list as one parameter, so the statement text is the same whatever its length (a statement
 * cache keyed by text stays small, and no driver parameter limit is reached).
 */
function inList(column: ColumnSchema, value: unknown, dialect: Sql['dialect'], out: Fragment): void {
  if (!Array.isArray(value) || value.length === 0) refuse(column, 'op.in takes a non-empty array');
  if (value.length > IN_LIST_MAX) {
    throw new Refusal(
      'LIST_TOO_LONG',
      `where.${column.name}: op.in takes at most ${IN_LIST_MAX} values, got ${value.length}`,
    );
  }
  if (column.kind === 'array' || column.kind === 'blob')
    refuse(column, `op.in does not apply to ${column.kind} columns`);
  if (value.some((v) => v === null)) refuse(column, 'op.in cannot match NULL: use op.isNull()');
  const encoded = value.map((v) => operand(column, v, dialect));
  const name = quoteIdent(column.name);
  if (dialect === 'postgres') {
    out.sql += `${name} = ANY(?)`;
    out.params.push(encoded);
    return;
  }
  // json_each yields SQL values without affinity, so the column's affinity applies as with `= ?`.
  out.sql += `${name} IN (SELECT value FROM json_each(?))`;
  out.params.push(`[${encoded.map((v) => (typeof v === 'bigint' ? v.toString() : JSON.stringify(v))).join(',')}]`);
}

function condition(column: ColumnSchema, part: OperatorPart, dialect: Sql['dialect'], out: Fragment): void {
  const name = quoteIdent(column.name);
  const { kind, value } = part;
  if (kind === 'increment') refuse(column, 'op.increment belongs in a patch, not in a where');
  switch (kind) {
    case 'eq':
      if (value === null) out.sql += `${name} IS NULL`;
      else {
        out.sql += `${name} = ?`;
        out.params.push(operand(column, value, dialect));
      }
      return;
    case 'ne':
      // Null-safe, as in JS: a NULL column is "not equal" to a value.
      if (value === null) out.sql += `${name} IS NOT NULL`;
      else {
        out.sql += dialect === 'postgres' ? `${name} IS DISTINCT FROM ?` : `${name} IS NOT ?`;
        out.params.push(operand(column, value, dialect));
      }
      return;
    case 'in':
      inList(column, value, dialect, out);
      return;
    case 'isNull':
      out.sql += `${name} IS NULL`;
      return;
    case 'notNull':
      out.sql += `${name} IS NOT NULL`;
      return;
    default:
      if (value === null) refuse(column, `op.${kind} cannot compare with NULL`);
      out.sql += `${name} ${COMPARISONS[kind]} ?`;
      out.params.push(operand(column, value, dialect));
  }
}

/**
 * `a = ? AND b = ANY(?)` for a `where`; empty text when it has no conditions. A column's condition is
 * a plain value (equality) or an operator built by `op`; conditions come out in the table's column
 * order, so calls of the same shape produce the same SQL text.
 */
export function whereSql(table: TableSchema, where: Where | undefined, dialect: Sql['dialect']): Fragment {
  const out: Fragment = { sql: '', params: [] };
  if (where === undefined) return out;
  if (!isPlainObject(where)) throw new Refusal('WHERE_INVALID', 'where must be an object of column conditions');
  const byColumn = new Map<string, OperatorPart[]>();
  for (const key of Object.keys(where)) {
    const column = columnOf(table, key);
    const value = where[key];
    const parts = Operator.partsOf(value) ?? [{ kind: 'eq', value }];
    if (parts.length === 0) refuse(column, 'an empty op.and()');
    const list = byColumn.get(column.name);
    if (list) list.push(...parts);
    else byColumn.set(column.name, [...parts]);
  }
  for (const [name, column] of table.columns) {
    const parts = byColumn.get(name);
    if (!parts) continue;
    for (const part of parts) {
      if (out.sql !== '') out.sql += ' AND ';
      condition(column, part, dialect, out);
    }
  }
  return out;
}

/** `ORDER BY ...` for find's orderBy; by default the primary key, so pages are stable. */
export function orderSql(
  table: TableSchema,
  orderBy: string | readonly (readonly [string, string])[] | undefined,
  dialect: Sql['dialect'],
): string {
  let pairs: (readonly [string, string])[];
  if (orderBy === undefined) pairs = table.primaryKey.map((name) => [name, 'asc'] as const);
  else if (typeof orderBy === 'string') pairs = [[orderBy, 'asc']];
  else if (Array.isArray(orderBy)) pairs = orderBy;
  else throw new Refusal('VALUE_INVALID', 'orderBy is a column name or [column, "asc" | "desc"] pairs');
  const parts: string[] = [];
  for (const pair of pairs) {
    if (!Array.isArray(pair) || typeof pair[0] !== 'string') {
      throw new Refusal('VALUE_INVALID', 'orderBy is a column name or [column, "asc" | "desc"] pairs');
    }
    const column = columnOf(table, pair[0]);
    const direction = pair[1];
    if (direction !== 'asc' && direction !== 'desc') {
      throw new Refusal('VALUE_INVALID', `orderBy direction of ${column.name} must be "asc" or "desc"`);
    }
    // NULLs sort last ascending on both dialects (PostgreSQL's default, which its indexes serve).
    const nulls = dialect === 'sqlite' && column.nullable ? (direction === 'asc' ? ' NULLS LAST' : ' NULLS FIRST') : '';
    parts.push(`${quoteIdent(column.name)} ${direction.toUpperCase()}${nulls}`);
  }
  return parts.length === 0 ? '' : ` ORDER BY ${parts.join(', ')}`;
}
