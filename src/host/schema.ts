import { OncelyError } from '../core/errors.js';
import type { Sql } from '../db/types.js';

/** How the store converts a column's values on the way in and out, derived from its declared type. */
export type ColumnKind =
  | 'integer'
  | 'real'
  | 'numeric'
  | 'boolean'
  | 'text'
  | 'uuid'
  | 'timestamp'
  | 'date'
  | 'json'
  | 'blob'
  | 'array'
  | 'other';

/** One column of an app table, as the database declares it. */
export interface ColumnSchema {
  /** The SQL name (snake_case). */
  name: string;
  /** The declared type: `data_type` on PostgreSQL, the declared type text on SQLite. */
  type: string;
  kind: ColumnKind;
  nullable: boolean;
  /** A default, an identity or a rowid alias fills it when an insert leaves it out. */
  hasDefault: boolean;
  /** Computed by the database; never written. */
  generated: boolean;
}

/** One app table: its columns in declaration order and the column sets the database keeps unique. */
export interface TableSchema {
  name: string;
  columns: Map<string, ColumnSchema>;
  /** Primary key columns in key order; empty when the table has none. */
  primaryKey: string[];
  /** Column sets of the primary key and every full (non-partial, non-expression) unique index. */
  uniqueSets: string[][];
  /** camelCase name -> SQL column name. */
  byJsName: Map<string, string>;
}

/** The app's tables (oncely's own `oncely_*` tables left out), read from the database. */
export interface AppSchema {
  dialect: Sql['dialect'];
  /** The PostgreSQL schema the tables live in (statements name it); null on SQLite. */
  namespace: string | null;
  tables: Map<string, TableSchema>;
  /** camelCase table name -> SQL table name. */
  byJsName: Map<string, string>;
}

/** `customerId` -> `customer_id`; `HTTPStatus` -> `http_status`. */
export function snakeCase(name: string): string {
  return name
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .replace(/([A-Z]+)([A-Z][a-z])/g, '$1_$2')
    .toLowerCase();
}

/** `customer_id` -> `customerId`; `address_line_1` -> `addressLine1`. */
export function camelCase(name: string): string {
  return name.replace(/_+([a-zA-Z0-9])/g, (_, c: string) => c.toUpperCase());
}

/** Quotes an identifier for SQL. Only names read from the database's own catalog are passed here. */
export function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/** The table a caller names, in SQL (`order_items`) or JS (`orderItems`) spelling; undefined when unknown. */
export function findTable(schema: AppSchema, name: string): TableSchema | undefined {
  const table = schema.tables.get(name);
  if (table) return table;
  const sqlName = schema.byJsName.get(name);
  return sqlName === undefined ? undefined : schema.tables.get(sqlName);
}

/** The column a caller names, in JS (`customerId`) or SQL (`customer_id`) spelling; undefined when unknown. */
export function findColumn(table: TableSchema, name: string): ColumnSchema | undefined {
  const sqlName = table.byJsName.get(name) ?? name;
  return table.columns.get(sqlName);
}

function kindOf(dialect: Sql['dialect'], type: string): ColumnKind {
  const t = type.toLowerCase();
  if (t === 'json' || t === 'jsonb') return 'json';
  if (t.startsWith('bool')) return 'boolean';
  if (t.includes('timestamp') || t.includes('datetime')) return 'timestamp';
  if (t === 'date') return 'date';
  if (t === 'uuid') return dialect === 'postgres' ? 'uuid' : 'text';
  if (dialect === 'postgres') {
    if (t === 'smallint' || t === 'integer' || t === 'bigint') return 'integer';
    if (t === 'real' || t === 'double precision') return 'real';
    if (t === 'numeric') return 'numeric';
    if (t === 'text' || t.startsWith('character')) return 'text';
    if (t === 'bytea') return 'blob';
    if (t === 'array') return 'array';
    return 'other';
  }
  // SQLite's affinity rules (https://sqlite.org/datatype3.html#determination_of_column_affinity).
  if (t.includes('int')) return 'integer';
  if (t.includes('char') || t.includes('clob') || t.includes('text')) return 'text';
  if (t === '' || t.includes('blob')) return 'blob';
  if (t.includes('real') || t.includes('floa') || t.includes('doub')) return 'real';
  return 'numeric';
}

function table(name: string): TableSchema {
  return { name, columns: new Map(), primaryKey: [], uniqueSets: [], byJsName: new Map() };
}

function finish(dialect: Sql['dialect'], namespace: string | null, tables: Map<string, TableSchema>): AppSchema {
  const byJsName = new Map<string, string>();
  for (const [name, t] of tables) {
    byJsName.set(camelCase(name), name);
    for (const column of t.columns.keys()) t.byJsName.set(camelCase(column), column);
  }
  return { dialect, namespace, tables, byJsName };
}

const isOwn = (name: string) => name.startsWith('oncely_');

async function readSqlite(sql: Sql): Promise<AppSchema> {
  const tables = new Map<string, TableSchema>();
  const names = await sql.all<{ name: string }>(
    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name",
  );
  for (const { name } of names) {
    if (isOwn(name)) continue;
    const t = table(name);
    const columns = await sql.all<{
      name: string;
      type: string;
      notnull: number;
      dflt_value: unknown;
      pk: number;
      hidden: number;
    }>('SELECT name, type, "notnull", dflt_value, pk, hidden FROM pragma_table_xinfo(?) ORDER BY cid', [name]);
    const pk = columns.filter((c) => c.pk > 0).sort((a, b) => a.pk - b.pk);
    const rowidAlias = pk.length === 1 && pk[0]?.type.toLowerCase() === 'integer' ? pk[0].name : undefined;
    for (const c of columns) {
      if (c.hidden === 1) continue;
      t.columns.set(c.name, {
        name: c.name,
        type: c.type,
        kind: kindOf('sqlite', c.type),
        nullable: c.notnull === 0 && c.name !== rowidAlias,
        hasDefault: c.dflt_value !== null || c.name === rowidAlias || c.hidden > 1,
        generated: c.hidden > 1,
      });
    }
    t.primaryKey = pk.map((c) => c.name);
    if (t.primaryKey.length > 0) t.uniqueSets.push(t.primaryKey);
    const indexes = await sql.all<{ name: string; unique: number; origin: string; partial: number }>(
      'SELECT name, "unique", origin, partial FROM pragma_index_list(?)',
      [name],
    );
    for (const index of indexes) {
      if (index.unique !== 1 || index.partial !== 0 || index.origin === 'pk') continue;
      const parts = await sql.all<{ name: string | null }>('SELECT name FROM pragma_index_info(?) ORDER BY seqno', [
        index.name,
      ]);
      if (parts.every((p) => p.name !== null)) t.uniqueSets.push(parts.map((p) => p.name as string));
    }
    tables.set(name, t);
  }
  return finish('sqlite', null, tables);
}

async function readPostgres(sql: Sql, schema: string | undefined): Promise<AppSchema> {
  const namespace = schema ?? (await sql.all<{ name: string }>('SELECT current_schema() AS name'))[0]?.name ?? 'public';
  const tables = new Map<string, TableSchema>();
  const columns = await sql.all<{
    table_name: string;
    column_name: string;
    data_type: string;
    is_nullable: string;
    column_default: string | null;
    is_identity: string;
    is_generated: string;
  }>(
    `SELECT c.table_name, c.column_name, c.data_type, c.is_nullable, c.column_default, c.is_identity, c.is_generated
       FROM information_schema.columns c
       JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
      WHERE c.table_schema = ? AND t.table_type = 'BASE TABLE'
      ORDER BY c.table_name, c.ordinal_position`,
    [namespace],
  );
  for (const c of columns) {
    if (isOwn(c.table_name)) continue;
    let t = tables.get(c.table_name);
    if (!t) {
      t = table(c.table_name);
      tables.set(c.table_name, t);
    }
    const generated = c.is_generated === 'ALWAYS';
    t.columns.set(c.column_name, {
      name: c.column_name,
      type: c.data_type,
      kind: kindOf('postgres', c.data_type),
      nullable: c.is_nullable === 'YES',
      hasDefault: c.column_default !== null || c.is_identity === 'YES' || generated,
      generated,
    });
  }
  const indexes = await sql.all<{ table_name: string; primary: boolean; columns: string[] }>(
    `SELECT t.relname AS table_name, i.indisprimary AS "primary",
            array_agg(a.attname::text ORDER BY k.ord) AS columns
       FROM pg_index i
       JOIN pg_class t ON t.oid = i.indrelid
       JOIN pg_namespace n ON n.oid = t.relnamespace
      CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
       JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum
      WHERE n.nspname = ? AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL
      GROUP BY t.relname, i.indexrelid, i.indisprimary
      ORDER BY t.relname, i.indisprimary DESC, i.indexrelid`,
    [namespace],
  );
  for (const index of indexes) {
    const t = tables.get(index.table_name);
    if (!t) continue;
    if (index.primary) t.primaryKey = index.columns;
    t.uniqueSets.push(index.columns);
  }
  return finish('postgres', namespace, tables);
}

/**
 * Reads the app's tables and columns from the database, leaving out oncely's own `oncely_*` tables.
 * Statements of the data store only ever name tables and columns found here.
 * @example
 * const schema = await readSchema(db, { schema: 'shop' }); // PostgreSQL schema; default: current_schema()
 */
export function readSchema(sql: Sql, options: { schema?: string } = {}): Promise<AppSchema> {
  return sql.dialect === 'sqlite' ? readSqlite(sql) : readPostgres(sql, options.schema);
}

// PostgreSQL types that hold the host's epoch-millisecond stamps. INTEGER is 32-bit (epoch ms went
// past 2^31 in January 1970) and REAL keeps 24 bits, so both fail or blur every stamp written today.
const STAMP_TYPES = new Set([
  'bigint',
  'numeric',
  'double precision',
  'timestamp with time zone',
  'timestamp without time zone',
]);

/**
 * Refuses `created_at`/`updated_at` columns that cannot hold the epoch milliseconds the host writes
 * into them, naming the column, so the first insert does not fail in production instead.
 * @example checkStampColumns(await readSchema(tx)); // in the migration's transaction: a refusal rolls it back
 */
export function checkStampColumns(schema: AppSchema): void {
  if (schema.dialect !== 'postgres') return; // SQLite integers are 64-bit and its types are affinities
  for (const table of schema.tables.values())
    for (const name of ['created_at', 'updated_at']) {
      const column = table.columns.get(name);
      if (!column || STAMP_TYPES.has(column.type.toLowerCase())) continue;
      throw new OncelyError(
        'SCHEMA_INVALID',
        `${table.name}.${name} is ${column.type.toUpperCase()}, which cannot hold epoch milliseconds: declare it BIGINT or TIMESTAMPTZ in schema.sql (an existing table: ALTER TABLE ${table.name} ALTER COLUMN ${name} TYPE BIGINT)`,
      );
    }
}
