import type { Sql } from '../db/types.js';
import { type ColumnSchema, findColumn, quoteIdent, type TableSchema } from './schema.js';
import type { Where } from './types.js';
import { encode, Refusal } from './values.js';

/** A piece of SQL text with its `?` parameters. */
export interface Fragment {
  sql: string;
  params: unknown[];
}

const OPERATORS = new Set(['eq', 'ne', 'in', 'lt', 'lte', 'gt', 'gte', 'isNull']);
const COMPARISONS: Record<string, string> = { lt: '<', lte: '<=', gt: '>', gte: '>=' };

function isPlainObject(value: unknown): value is Record<string, unknown> {
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
  if (value === undefined) refuse(column, 'undefined is not a value (use isNull to match NULL)');
  if (Array.isArray(value) && column.kind !== 'json' && column.kind !== 'array') {
    refuse(column, 'an array is not a value: use { in: [...] }');
  }
  return encode(column, value, dialect);
}

function condition(column: ColumnSchema, op: string, value: unknown, dialect: Sql['dialect'], out: Fragment): void {
  const name = quoteIdent(column.name);
  switch (op) {
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
    case 'in': {
      if (!Array.isArray(value) || value.length === 0) refuse(column, '`in` takes a non-empty array');
      if (value.some((v) => v === null)) refuse(column, '`in` cannot match NULL: use isNull');
      out.sql += `${name} IN (${value.map(() => '?').join(', ')})`;
      for (const v of value) out.params.push(operand(column, v, dialect));
      return;
    }
    case 'isNull':
      if (typeof value !== 'boolean') refuse(column, '`isNull` takes true or false');
      out.sql += `${name} ${value ? 'IS NULL' : 'IS NOT NULL'}`;
      return;
    default:
      if (value === null) refuse(column, `\`${op}\` cannot compare with NULL`);
      out.sql += `${name} ${COMPARISONS[op]} ?`;
      out.params.push(operand(column, value, dialect));
  }
}

/**
 * `a = ? AND b IN (?, ?)` for a `where`; empty text when it has no conditions. Conditions come out
 * in the table's column order, so calls of the same shape produce the same SQL text.
 */
export function whereSql(table: TableSchema, where: Where | undefined, dialect: Sql['dialect']): Fragment {
  const out: Fragment = { sql: '', params: [] };
  if (where === undefined) return out;
  if (!isPlainObject(where)) throw new Refusal('WHERE_INVALID', 'where must be an object of column conditions');
  const byColumn = new Map<string, [string, unknown][]>();
  for (const key of Object.keys(where)) {
    const column = columnOf(table, key);
    const value = where[key];
    let ops: [string, unknown][];
    if (isPlainObject(value)) {
      ops = Object.entries(value);
      if (ops.length === 0) refuse(column, 'an empty condition');
      for (const [op] of ops) if (!OPERATORS.has(op)) refuse(column, `unknown operator ${JSON.stringify(op)}`);
    } else ops = [['eq', value]];
    const list = byColumn.get(column.name);
    if (list) list.push(...ops);
    else byColumn.set(column.name, ops);
  }
  for (const [name, column] of table.columns) {
    const ops = byColumn.get(name);
    if (!ops) continue;
    for (const [op, value] of ops) {
      if (out.sql !== '') out.sql += ' AND ';
      condition(column, op, value, dialect, out);
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
