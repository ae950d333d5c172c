import { type ErrorCode, OncelyError } from '../core/errors.js';
import type { Sql } from '../db/types.js';
import { Operator } from './operators.js';
import type { ColumnSchema, TableSchema } from './schema.js';

/**
 * An expected refusal of a store call: becomes `{ ok: false, error }`, never reaches the caller as
 * a throw. Its own class, so that other OncelyErrors a call meets (a lost database, a timeout) still throw.
 */
export class Refusal extends OncelyError {
  declare readonly code: ErrorCode;

  constructor(code: ErrorCode, message: string) {
    super(code, message);
    this.name = 'Refusal';
  }
}

const INTEGER_RANGE: Record<string, bigint> = {
  smallint: 2n ** 15n,
  integer: 2n ** 31n,
};
const INT64 = 2n ** 63n;

function invalid(column: ColumnSchema, value: unknown, why: string): Refusal {
  const shown = typeof value === 'string' ? JSON.stringify(value.slice(0, 40)) : typeof value;
  return new Refusal('VALUE_INVALID', `column ${column.name} (${column.type}): ${shown} ${why}`);
}

function isBinary(value: unknown): value is Uint8Array {
  return value instanceof Uint8Array;
}

function toJson(column: ColumnSchema, value: unknown): string {
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch {
    throw invalid(column, value, 'cannot be stored as JSON');
  }
  if (text === undefined) throw invalid(column, value, 'cannot be stored as JSON');
  return text;
}

function epochMs(column: ColumnSchema, value: unknown): number {
  const ms =
    value instanceof Date
      ? value.getTime()
      : typeof value === 'number'
        ? value
        : typeof value === 'string'
          ? Date.parse(value)
          : Number.NaN;
  if (!Number.isFinite(ms)) throw invalid(column, value, 'is not a time');
  return ms;
}

function integer(column: ColumnSchema, value: unknown, dialect: Sql['dialect']): unknown {
  let big: bigint;
  if (typeof value === 'number') {
    if (!Number.isInteger(value)) throw invalid(column, value, 'is not an integer');
    if (Number.isSafeInteger(value) && Math.abs(value) < 2 ** 15) return value;
    big = BigInt(value);
  } else if (typeof value === 'bigint') big = value;
  else if (typeof value === 'boolean') return value ? 1 : 0;
  else if (value instanceof Date) return epochMs(column, value);
  else if (typeof value === 'string' && /^-?\d{1,19}$/.test(value)) big = BigInt(value);
  else throw invalid(column, value, 'is not an integer');
  const limit = (dialect === 'postgres' ? INTEGER_RANGE[column.type] : undefined) ?? INT64;
  if (big >= limit || big < -limit) throw invalid(column, value, 'is out of range');
  if (dialect === 'postgres') return column.type === 'bigint' ? big.toString() : Number(big);
  return big >= BigInt(Number.MIN_SAFE_INTEGER) && big <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(big) : big;
}

function numeric(column: ColumnSchema, value: unknown, dialect: Sql['dialect']): unknown {
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw invalid(column, value, 'is not a finite number');
    return value;
  }
  if (typeof value === 'bigint') return dialect === 'postgres' ? value.toString() : value;
  if (typeof value === 'boolean') return value ? 1 : 0;
  if (value instanceof Date) return epochMs(column, value);
  if (typeof value === 'string' && /^\s*-?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?\s*$/i.test(value)) {
    // PostgreSQL's numeric holds "1e309" exactly; a double (and SQLite's numeric affinity, which
    // converts the text to one) would store Infinity.
    if (column.kind === 'numeric' && dialect === 'postgres') return value.trim();
    const number = Number(value);
    if (!Number.isFinite(number)) throw invalid(column, value, 'is out of range');
    return column.kind === 'real' ? number : value.trim();
  }
  throw invalid(column, value, 'is not a number');
}

/** An element of an array column: a scalar, or a nested array of them (a multidimensional array). */
function isArrayElement(value: unknown): boolean {
  if (Array.isArray(value)) return value.every(isArrayElement);
  return (
    value === null ||
    ['string', 'number', 'boolean', 'bigint'].includes(typeof value) ||
    value instanceof Date ||
    isBinary(value)
  );
}

function localDate(date: Date): string {
  const pad = (n: number) => String(n).padStart(2, '0');
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}`;
}

/**
 * Converts a JS value to what the column's driver takes. null stays null (SQL NULL); undefined is
 * dropped before this is called. Throws a VALUE_INVALID refusal for values the column cannot hold,
 * so that PostgreSQL never sees them: a failed statement there would abort the whole transaction.
 * Objects and arrays are values of JSON (and array) columns only: a scalar column refuses them,
 * so input shaped like `{ "ne": "x" }` can neither be stored as text nor act as anything else.
 */
export function encode(column: ColumnSchema, value: unknown, dialect: Sql['dialect']): unknown {
  if (value === null) return null;
  if (typeof value === 'function' || typeof value === 'symbol' || value === undefined) {
    throw invalid(column, value, 'is not a value');
  }
  if (Operator.partsOf(value)) throw invalid(column, value, 'is an op condition, which only a where takes');
  if (value instanceof Date && Number.isNaN(value.getTime())) throw invalid(column, value, 'is an invalid Date');
  switch (column.kind) {
    case 'integer':
      return integer(column, value, dialect);
    case 'real':
    case 'numeric':
      return numeric(column, value, dialect);
    case 'boolean':
      if (typeof value === 'boolean') return dialect === 'postgres' ? value : value ? 1 : 0;
      if (value === 0 || value === 1) return dialect === 'postgres' ? value === 1 : value;
      throw invalid(column, value, 'is not a boolean');
    case 'timestamp': {
      const ms = epochMs(column, value);
      return dialect === 'postgres' ? new Date(ms) : new Date(ms).toISOString();
    }
    case 'date':
      if (value instanceof Date) return localDate(value);
      if (typeof value === 'string' && /^\d{4}-\d{2}-\d{2}$/.test(value)) return value;
      throw invalid(column, value, 'is not a date (YYYY-MM-DD or Date)');
    case 'uuid':
      if (typeof value === 'string' && /^[0-9a-f]{8}-?([0-9a-f]{4}-?){3}[0-9a-f]{12}$/i.test(value)) return value;
      throw invalid(column, value, 'is not a UUID');
    case 'json':
      return toJson(column, value);
    case 'blob':
      if (isBinary(value)) return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
      throw invalid(column, value, 'is not a Buffer');
    case 'array':
      if (Array.isArray(value) && value.every(isArrayElement)) return value;
      throw invalid(column, value, 'is not an array of scalars');
    default:
      if (typeof value === 'string') return value;
      if (typeof value === 'number') {
        if (!Number.isFinite(value)) throw invalid(column, value, 'is not a finite number');
        return value;
      }
      if (typeof value === 'boolean' || typeof value === 'bigint') return String(value);
      if (value instanceof Date) return value.toISOString();
      if (isBinary(value)) {
        if (column.kind === 'text') throw invalid(column, value, 'is binary: use a blob/bytea column');
        return value;
      }
      throw invalid(column, value, 'is an object or array: only JSON columns hold those');
  }
}

/** Turns a row as the driver returns it into the JS shape: camelCase names, the same values on both dialects. */
export function decodeRow(
  table: TableSchema,
  row: Record<string, unknown>,
  dialect: Sql['dialect'],
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const name in row) {
    const column = table.columns.get(name);
    let value = row[name];
    // Past 2^53 (a bigint from SQLite, text from pg's int8): exact digits, the same on both dialects.
    if (typeof value === 'bigint') value = value.toString();
    if (column && value !== null && value !== undefined) {
      switch (column.kind) {
        case 'integer':
          // pg returns int8 as text; one a number holds exactly is a number, as on SQLite.
          if (typeof value === 'string' && Number.isSafeInteger(Number(value))) value = Number(value);
          break;
        case 'boolean':
          if (typeof value === 'number') value = value !== 0;
          break;
        case 'timestamp':
          if (typeof value === 'string' || typeof value === 'number') {
            const date = new Date(value);
            if (!Number.isNaN(date.getTime())) value = date;
          }
          break;
        case 'date':
          // pg parses a date as local midnight.
          if (value instanceof Date) value = localDate(value);
          break;
        case 'json':
          if (dialect === 'sqlite' && typeof value === 'string') {
            try {
              value = JSON.parse(value);
            } catch {}
          }
          break;
      }
    }
    out[column ? camelCaseOf(table, column.name) : name] = value;
  }
  return out;
}

const camelNames = new WeakMap<TableSchema, Map<string, string>>();
function camelCaseOf(table: TableSchema, column: string): string {
  let names = camelNames.get(table);
  if (!names) {
    names = new Map();
    for (const [js, sql] of table.byJsName) names.set(sql, js);
    camelNames.set(table, names);
  }
  return names.get(column) ?? column;
}
