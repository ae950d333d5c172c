/**
 * Residual-duplicate scans (the seeds' daily reconciliation): keys stop a repeated intent, but a
 * bug (a key built from a random value, a handler that writes twice) can still leave two effect
 * rows for one business intent. The app declares its effect tables and the columns that name one
 * intent; a scan finds groups of more than one row, keeps them as findings, and counts each extra
 * row once as a duplicate that was not intercepted.
 */
import { decodeCursor, encodeCursor, invalidCursor } from '../core/cursor.js';
import { OncelyError } from '../core/errors.js';
import { canonicalJson } from '../core/fingerprint.js';
import type { OncelyLogger } from '../core/observer.js';
import type { Sql } from '../db/types.js';
import { type AppSchema, findColumn, findTable, quoteIdent } from '../host/schema.js';
import type { Totals } from '../host/totals.js';
import { decodeRow } from '../host/values.js';
import { duplicateGroups, findingsPage, markCounted, type ScanTarget, upsertFinding } from './duplicates-sql.js';

export { duplicatesMigrations, type ScanTarget } from './duplicates-sql.js';

/** An effect table and the columns (app camelCase names, as `ctx.store` uses them) that name one business intent. */
export interface EffectTable {
  table: string;
  by: readonly string[];
}

/** One business key seen with more than one row. */
export interface DuplicateFinding {
  /** The table's SQL name. */
  table: string;
  /** Canonical JSON of the key's values by camelCase column name, e.g. `{"kind":"charge","orderId":"O-1"}`. */
  businessKey: string;
  /** Rows with this key at the last scan that saw it. */
  count: number;
  /** When a scan first and last saw the key with more than one row (epoch ms). */
  firstSeen: number;
  lastSeen: number;
  /** The oldest and newest of those rows by `created_at` (epoch ms); null when the table has no such column. */
  rowsFirstAt: number | null;
  rowsLastAt: number | null;
  /** Extra rows (count - 1) already counted in `oncely_duplicates_total`. */
  counted: number;
}

/** What one scan did, per table and in all. */
export interface DuplicateScan {
  /** When the scan started (epoch ms): the findings' `lastSeen`. */
  at: number;
  tables: { table: string; groups: number; truncated: boolean }[];
  /** The groups this scan saw, as stored after it. */
  findings: DuplicateFinding[];
  /** Extra rows this scan counted (others were counted before, or by a scan beside it). */
  counted: number;
}

/** Groups one scan reads per table; a table with more is read on from there by the next scan. */
export const GROUPS_PER_TABLE = 1_000;

// Findings settled per transaction: few commits per scan, and row locks held for a bounded batch.
const GROUPS_PER_TRANSACTION = 100;

/** The largest page `listFindings` answers. */
export const FINDINGS_PAGE_MAX = 1_000;

// GROUP BY needs an equality the database has for the type: json (PostgreSQL) has none, and blobs
// and arrays have no canonical JSON a finding could name.
const UNGROUPABLE = new Set(['json', 'blob', 'array']);

/**
 * The declared effects checked against the app's schema: TABLE_UNKNOWN or COLUMN_UNKNOWN naming
 * what is missing, so statements only ever name tables and columns read from the catalog.
 * @example resolveEffects(schema, [{ table: 'ledger', by: ['orderId', 'kind'] }])
 */
export function resolveEffects(schema: AppSchema, effects: readonly EffectTable[] = []): ScanTarget[] {
  if (!Array.isArray(effects)) throw new OncelyError('CONFIG_INVALID', 'effects must be an array of { table, by }');
  const seen = new Set<string>();
  return effects.map((effect, i) => {
    const name = effect?.table;
    if (typeof name !== 'string' || !Array.isArray(effect.by) || effect.by.length === 0)
      throw new OncelyError('CONFIG_INVALID', `effects[${i}] must be { table: string, by: [column, ...] }`);
    const table = findTable(schema, name);
    if (!table)
      throw new OncelyError('TABLE_UNKNOWN', `effects[${i}]: no table ${JSON.stringify(name)} in the app schema`);
    if (seen.has(table.name)) throw new OncelyError('CONFIG_INVALID', `effects: table ${table.name} is declared twice`);
    seen.add(table.name);
    const columns = (effect.by as readonly unknown[]).map((by) => {
      const column = typeof by === 'string' ? findColumn(table, by) : undefined;
      if (!column)
        throw new OncelyError(
          'COLUMN_UNKNOWN',
          `effects[${i}]: table ${table.name} has no column ${JSON.stringify(by)}`,
        );
      if (UNGROUPABLE.has(column.kind))
        throw new OncelyError(
          'CONFIG_INVALID',
          `effects[${i}]: ${table.name}.${column.name} is ${column.kind}, not a key column`,
        );
      return column.name;
    });
    if (new Set(columns).size !== columns.length)
      throw new OncelyError('CONFIG_INVALID', `effects[${i}]: a column of ${table.name} is named twice in by`);
    const prefix = schema.namespace === null ? '' : `${quoteIdent(schema.namespace)}.`;
    const stamp = table.columns.has('created_at') ? 'created_at' : null;
    return { table: table.name, from: `${prefix}${quoteIdent(table.name)}`, columns, stamp, schema: table };
  });
}

/** A stamp as epoch ms: BIGINT (a number, or pg's int8 text), TIMESTAMPTZ (a Date), or ISO text. */
function epochMs(value: unknown): number | null {
  if (value === null || value === undefined) return null;
  if (value instanceof Date) return value.getTime();
  const n = Number(value);
  if (Number.isFinite(n)) return n;
  const parsed = Date.parse(String(value));
  return Number.isNaN(parsed) ? null : parsed;
}

/**
 * Scans declared effect tables for residual duplicates. Each table is read in pages of
 * GROUPS_PER_TABLE groups: a scan reads one page and the next scan of this process goes on after
 * it, back to the start once a page comes back short, so every group is seen however many there are.
 */
export class DuplicateScanner {
  private readonly after = new Map<string, unknown[]>();

  /** Scans `targets()` (resolved by resolveEffects) on `db`; `groupsPerTable` defaults to GROUPS_PER_TABLE. */
  constructor(
    private readonly db: Sql,
    /** The host's totals: counts are written in the transaction that marks them counted. */
    private readonly totals: Totals,
    private readonly targets: () => readonly ScanTarget[],
    private readonly options: { logger?: OncelyLogger; groupsPerTable?: number } = {},
  ) {}

  /** One pass over every effect table: findings upserted, new extra rows counted once across processes. */
  async scan(now = Date.now()): Promise<DuplicateScan> {
    const limit = this.options.groupsPerTable ?? GROUPS_PER_TABLE;
    const report: DuplicateScan = { at: now, tables: [], findings: [], counted: 0 };
    for (const target of this.targets()) {
      let groups = await this.groups(target, limit, this.after.get(target.table) ?? null);
      // Nothing after the last page: the table is read from its start in this scan instead.
      if (groups.length === 0 && this.after.has(target.table)) groups = await this.groups(target, limit, null);
      const last = groups.at(-1);
      // A full page: the next scan goes on after its last group; a short one: from the start.
      if (groups.length === limit && last)
        this.after.set(
          target.table,
          target.columns.map((c) => last[c]),
        );
      else this.after.delete(target.table);
      report.tables.push({ table: target.table, groups: groups.length, truncated: groups.length === limit });
      for (let i = 0; i < groups.length; i += GROUPS_PER_TRANSACTION) {
        const batch = await this.record(target, groups.slice(i, i + GROUPS_PER_TRANSACTION), now);
        report.counted += batch.newlyCounted;
        report.findings.push(...batch.findings);
      }
    }
    if (report.counted > 0)
      this.options.logger?.warn(
        { counted: report.counted, findings: report.findings.length },
        'oncely: duplicate scan found effect rows no key intercepted',
      );
    return report;
  }

  private async groups(target: ScanTarget, limit: number, after: unknown[] | null) {
    const statement = duplicateGroups(target, limit, after);
    return this.db.all(statement.text, statement.values);
  }

  /**
   * Upserts a batch of groups' findings and counts their extra rows not counted yet, in one
   * transaction: of two scans at once, only the one whose conditional update of `counted` changed
   * a finding counts its rows. Both take the findings' row locks in key order, so neither waits on
   * the other in a cycle.
   */
  private record(
    target: ScanTarget,
    groups: readonly Record<string, unknown>[],
    now: number,
  ): Promise<{ findings: DuplicateFinding[]; newlyCounted: number }> {
    return this.totals.transaction(async (tx, counts) => {
      const findings: DuplicateFinding[] = [];
      let newlyCounted = 0;
      for (const group of groups) {
        const values = Object.fromEntries(target.columns.map((c) => [c, group[c]]));
        const key = canonicalJson(decodeRow(target.schema, values, this.db.dialect));
        const count = Number(group.oncely_count);
        const first = epochMs(group.oncely_first_at);
        const upsert = upsertFinding(target.table, key, count, now, first, epochMs(group.oncely_last_at));
        // An upsert with RETURNING answers its one row, inserted or updated.
        const [row] = await tx.all<FindingRow>(upsert.text, upsert.values);
        const finding = findingOf(row as FindingRow);
        const extra = count - 1 - finding.counted;
        const mark = markCounted(target.table, key, finding.counted, count - 1);
        // 0 rows changed: a scan beside this one moved `counted` first and counted these rows itself.
        if (extra > 0 && (await tx.run(mark.text, mark.values)) === 1) {
          newlyCounted += extra;
          finding.counted = count - 1;
        }
        findings.push(finding);
      }
      if (newlyCounted > 0)
        await counts.count('oncely_duplicates_total', ['scan', target.table, 'false'], newlyCounted);
      return { findings, newlyCounted };
    });
  }
}

const iso = (ms: number | null) => (ms === null ? '-' : new Date(ms).toISOString());

/** What `oncely reconcile --duplicates` prints: a line per finding of the scan, then what it counted. */
export function scanText(scan: DuplicateScan): string {
  const lines = scan.findings.map(
    (f) =>
      `${f.table}\t${f.businessKey}\t${f.count} rows (${f.count - 1} extra)\trows created ${iso(f.rowsFirstAt)} .. ${iso(f.rowsLastAt)}\tfirst seen ${iso(f.firstSeen)}\tlast seen ${iso(f.lastSeen)}`,
  );
  for (const t of scan.tables)
    if (t.truncated) lines.push(`${t.table}: ${t.groups} groups read, more left: the next scan reads on from there`);
  lines.push(
    `${scan.findings.length} finding(s) in ${scan.tables.length} effect table(s); ${scan.counted} extra row(s) newly counted as duplicates not intercepted`,
  );
  return lines.join('\n');
}

interface FindingRow {
  table_name: string;
  business_key: string;
  count: number | string;
  first_seen: number | string;
  last_seen: number | string;
  rows_first_at: number | string | null;
  rows_last_at: number | string | null;
  counted: number | string;
}

function findingOf(row: FindingRow): DuplicateFinding {
  return {
    table: row.table_name,
    businessKey: row.business_key,
    count: Number(row.count),
    firstSeen: Number(row.first_seen),
    lastSeen: Number(row.last_seen),
    rowsFirstAt: row.rows_first_at === null ? null : Number(row.rows_first_at),
    rowsLastAt: row.rows_last_at === null ? null : Number(row.rows_last_at),
    counted: Number(row.counted),
  };
}

/**
 * Findings in (table, business key) order, a page at a time; pass `cursor` back for the next, null
 * after the last. Bad input is INVALID_ARGUMENT or CURSOR_INVALID.
 * @example const { findings, cursor } = await listFindings(db, { table: 'ledger', limit: 100 });
 */
export async function listFindings(
  db: Sql,
  options: { table?: string; limit: number; cursor?: string },
): Promise<{ findings: DuplicateFinding[]; cursor: string | null }> {
  const { table, limit, cursor } = options;
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > FINDINGS_PAGE_MAX)
    throw new OncelyError(
      'INVALID_ARGUMENT',
      `limit must be a whole number from 1 to ${FINDINGS_PAGE_MAX}, got ${limit}`,
    );
  if (table !== undefined && typeof table !== 'string')
    throw new OncelyError('INVALID_ARGUMENT', 'table must be a table name');
  const page = findingsPage(table, limit, cursor === undefined ? null : findingsPosition(cursor));
  const rows = (await db.all<FindingRow>(page.text, page.values)).map(findingOf);
  const last = rows.at(-1);
  return {
    findings: rows,
    cursor: rows.length === limit && last ? encodeCursor([last.table, last.businessKey]) : null,
  };
}

function findingsPosition(cursor: string): [string, string] {
  const position = decodeCursor(cursor);
  if (Array.isArray(position) && position.length === 2 && position.every((p) => typeof p === 'string'))
    return position as [string, string];
  throw invalidCursor();
}
