/**
 * Retention: bounded purges of oncely's tables. Each batch deletes at most `batch` rows in its own
 * short transaction, so live intake, claims and relays interleave between batches instead of
 * waiting for a whole purge; a pass stops per table after `maxBatches` or when nothing is left.
 */
import { refuseUnknownKeys } from '../core/closest.js';
import { type Duration, type Ttl, toMs, ttlToMs } from '../core/duration.js';
import { OncelyError } from '../core/errors.js';
import type { Metrics } from '../core/metrics.js';
import type { Db, Sql } from '../db/types.js';
import type { RecordStore } from '../store.js';
import {
  type Cutoffs,
  countExpiredRecords,
  countOfFlows,
  countRows,
  deleteBatch,
  deleteOfFlows,
  FLOW_CHILDREN,
  FLOWS,
  PLAIN_TARGETS,
  pickFlows,
  RECORDS_TABLE,
  tableExists,
} from './retention-sql.js';

/**
 * How long each kind of finished row is kept, and how purges run. A purged event id or flow id is
 * new again: the events retention is the dedupe window of intake.
 * @example retention: { every: '1h', events: '30d', deadLetters: '90d' }
 */
export interface RetentionConfig {
  /** How often `oncely serve` purges. Default '1h'. */
  every?: Duration;
  /** Most rows one DELETE removes (one short transaction). Default 1000. */
  batch?: number;
  /** Most batches per table in one pass; the next pass goes on. Default 1000 (a million rows per table). */
  maxBatches?: number;
  /** Finished events (applied, stale, no consumer), by their last update. Default '30d'. */
  events?: Ttl;
  /** Delivered outbox rows, by their delivery. Default '7d'. */
  outbox?: Ttl;
  /** Completed and cancelled flows with their steps and signals, by their last update. Default '30d'. */
  flows?: Ttl;
  /** Decided approvals (approved, rejected, expired), by their decision. Default '30d'. */
  approvals?: Ttl;
  /** Settled credit reservations (confirmed, released), by their settlement. Default '30d'. */
  reservations?: Ttl;
  /**
   * Dead-lettered events and outbox rows, by when they died, and failed flows (with their steps and
   * signals), by their last update. Default 'permanent' (kept until replayed or retried).
   */
  deadLetters?: Ttl;
  /** Residual-duplicate findings, by the last scan that saw them. Default '90d'. */
  duplicateFindings?: Ttl;
  /** The admin API's audit log, by when each action was taken. Default '365d'. */
  adminActions?: Ttl;
}

/** The retentions a config leaves unset. */
export const RETENTION_DEFAULTS = {
  every: '1h',
  batch: 1000,
  maxBatches: 1000,
  events: '30d',
  outbox: '7d',
  flows: '30d',
  approvals: '30d',
  reservations: '30d',
  deadLetters: 'permanent',
  duplicateFindings: '90d',
  adminActions: '365d',
} as const satisfies Required<RetentionConfig>;

/** A validated retention config: milliseconds, null for kept forever. */
export interface RetentionSettings {
  /** False when the config says `retention: false`: no scheduled purges (`oncely purge` still works). */
  scheduled: boolean;
  everyMs: number;
  batch: number;
  maxBatches: number;
  keep: Record<keyof Cutoffs, number | null>;
}

const KINDS = [
  'events',
  'outbox',
  'flows',
  'approvals',
  'reservations',
  'deadLetters',
  'duplicateFindings',
  'adminActions',
] as const satisfies readonly (keyof Cutoffs)[];
const KNOWN = new Set<string>(['every', 'batch', 'maxBatches', ...KINDS]);

/** Validates `retention` of a host config: any bad value is CONFIG_INVALID naming it. */
export function retentionSettings(config: RetentionConfig | false | undefined): RetentionSettings {
  const given = config === false ? {} : (config ?? {});
  if (typeof given !== 'object' || given === null || Array.isArray(given))
    throw new OncelyError('CONFIG_INVALID', 'retention must be an object of retentions, or false');
  refuseUnknownKeys(given, [...KNOWN], 'oncely.config.ts', 'retention.');
  const merged = { ...RETENTION_DEFAULTS, ...given };
  const checked = <T>(what: string, read: () => T): T => {
    try {
      return read();
    } catch (error) {
      throw new OncelyError('CONFIG_INVALID', `retention.${what}: ${(error as Error).message}`, { cause: error });
    }
  };
  const keep = {} as Record<keyof Cutoffs, number | null>;
  for (const kind of KINDS) {
    keep[kind] = checked(kind, () => ttlToMs(merged[kind], kind));
    // Zero would purge a row the moment it finishes: no dedupe window left at all.
    if (keep[kind] === 0)
      throw new OncelyError('CONFIG_INVALID', `retention.${kind} must be longer than 0 ('permanent' keeps them)`);
  }
  const everyMs = checked('every', () => toMs(merged.every, 'every'));
  if (everyMs <= 0) throw new OncelyError('CONFIG_INVALID', 'retention.every must be longer than 0');
  return {
    scheduled: config !== false,
    everyMs,
    batch: wholeNumber('batch', merged.batch),
    maxBatches: wholeNumber('maxBatches', merged.maxBatches),
    keep,
  };
}

function wholeNumber(name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1)
    throw new OncelyError(
      'CONFIG_INVALID',
      `retention.${name} must be a whole number of at least 1, got ${String(value)}`,
    );
  return value;
}

/** What one pass removed (or, in a dry run, would remove) from one table. */
export interface TablePurge {
  table: string;
  /** Rows deleted; in a dry run, rows that match now (a pass may stop at maxBatches before all go). */
  rows: number;
  /** DELETE batches run (0 in a dry run). */
  batches: number;
}

/** What a purge pass did, per table present on the database, in the order it purged them. */
export interface PurgeReport {
  dryRun: boolean;
  tables: TablePurge[];
}

/** Options of one purge pass. */
export interface PurgeOptions {
  /** Count what would go, delete nothing. */
  dryRun?: boolean;
  /** The record store on this database, whose expired records go first. */
  records?: RecordStore;
  /** Where `oncely_purged_total{table}` is counted. */
  metrics?: Metrics;
  /** The pass's clock (default Date.now()): rows older than now minus their retention go. */
  now?: number;
  /** Ends the pass after the batch under way (a host stopping); what it removed so far is reported. */
  signal?: AbortSignal;
  /** Called after each DELETE batch with the rows it removed and how long it took (for logs and tests). */
  onBatch?: (table: string, rows: number, ms: number) => void;
}

/**
 * Runs one purge pass on `db`: expired records, then every table whose rows are past their
 * retention. Tables a database does not have (a component never migrated there) are skipped.
 * @example const report = await purge(db, retentionSettings({ events: '14d' }), { dryRun: true })
 */
export async function purge(db: Db, settings: RetentionSettings, options: PurgeOptions = {}): Promise<PurgeReport> {
  const now = options.now ?? Date.now();
  const dryRun = options.dryRun === true;
  const cutoffs = {} as Cutoffs;
  for (const kind of KINDS) {
    const ms = settings.keep[kind];
    cutoffs[kind] = ms === null ? null : now - ms;
  }
  const tables: TablePurge[] = [];
  const present = async (table: string) => (await db.all(...spread(tableExists(db.dialect, table)))).length > 0;
  const batches = new Batches(settings, options, db.dialect === 'sqlite');

  if (options.records && (await present(RECORDS_TABLE))) {
    const store = options.records;
    tables.push(
      dryRun
        ? { table: RECORDS_TABLE, rows: await count(db, countExpiredRecords(db.dialect, now)), batches: 0 }
        : await batches.run(RECORDS_TABLE, () => store.purgeExpired(now, settings.batch)),
    );
  }
  for (const target of PLAIN_TARGETS) {
    const where = target.where(cutoffs);
    if (!where || !(await present(target.table))) continue;
    tables.push(
      dryRun
        ? { table: target.table, rows: await count(db, countRows(target.table, where)), batches: 0 }
        : await batches.run(target.table, () =>
            db.run(...spread(deleteBatch(db.dialect, target.table, where, settings.batch))),
          ),
    );
  }
  const flowsWhere = FLOWS.where(cutoffs);
  if (flowsWhere && (await present(FLOWS.table))) {
    if (dryRun) {
      tables.push({ table: FLOWS.table, rows: await count(db, countRows(FLOWS.table, flowsWhere)), batches: 0 });
      for (const child of FLOW_CHILDREN)
        tables.push({ table: child, rows: await count(db, countOfFlows(child, flowsWhere)), batches: 0 });
    } else {
      const children = new Map<string, number>(FLOW_CHILDREN.map((c) => [c, 0]));
      const flows = await batches.run(FLOWS.table, async () => {
        // One transaction per batch: a flow never loses its steps without going itself, or the reverse.
        const { removed, ofChildren } = await db.transaction(async (tx) => {
          const picked = await tx.all<{ workflow_id: string }>(
            ...spread(pickFlows(db.dialect, flowsWhere, settings.batch)),
          );
          const ids = picked.map((p) => p.workflow_id);
          const ofChildren: [string, number][] = [];
          if (ids.length === 0) return { removed: 0, ofChildren };
          for (const child of FLOW_CHILDREN)
            ofChildren.push([child, await tx.run(...spread(deleteOfFlows(db.dialect, child, ids)))]);
          return { removed: await tx.run(...spread(deleteOfFlows(db.dialect, FLOWS.table, ids))), ofChildren };
        });
        // Counted once committed: a batch rolled back removed nothing.
        for (const [child, rows] of ofChildren) {
          children.set(child, (children.get(child) ?? 0) + rows);
          if (rows > 0) options.metrics?.add('oncely_purged_total', [child], rows);
        }
        return removed;
      });
      tables.push(flows);
      for (const [child, rows] of children) tables.push({ table: child, rows, batches: flows.batches });
    }
  }
  return { dryRun, tables };
}

/**
 * Runs one table's batches: until a batch comes back short, or maxBatches. On SQLite one write
 * lock serves the whole database, and a purge that takes it again at once after each commit
 * starves other processes' writers (their busy handler sleeps and retries): it rests as long as
 * each batch took, so the lock is free at least half of the time.
 */
class Batches {
  constructor(
    private readonly settings: RetentionSettings,
    private readonly options: PurgeOptions,
    private readonly rests: boolean,
  ) {}

  async run(table: string, batch: () => Promise<number>): Promise<TablePurge> {
    let rows = 0;
    let batches = 0;
    while (batches < this.settings.maxBatches && !this.options.signal?.aborted) {
      const started = performance.now();
      const removed = await batch();
      const ms = performance.now() - started;
      batches += 1;
      rows += removed;
      this.options.onBatch?.(table, removed, ms);
      if (removed > 0) this.options.metrics?.add('oncely_purged_total', [table], removed);
      if (removed < this.settings.batch) break;
      if (this.rests) await new Promise((resolve) => setTimeout(resolve, Math.max(1, ms)));
    }
    return { table, rows, batches };
  }
}

async function count(sql: Sql, statement: { text: string; values: unknown[] }): Promise<number> {
  const [row] = await sql.all<{ n: number | string }>(statement.text, statement.values);
  return Number(row?.n ?? 0);
}

const spread = (s: { text: string; values: unknown[] }): [string, unknown[]] => [s.text, s.values];

/** One line per table for `oncely purge`: what went (or would go, in a dry run), and the total. */
export function purgeText(report: PurgeReport): string {
  const verb = report.dryRun ? 'would remove' : 'removed';
  const width = Math.max(0, ...report.tables.map((t) => t.table.length));
  const lines = report.tables.map((t) => `${t.table.padEnd(width)}  ${verb} ${t.rows}`);
  const total = report.tables.reduce((sum, t) => sum + t.rows, 0);
  lines.push(`${report.dryRun ? 'dry run: nothing removed; ' : ''}${verb} ${total} row(s) in all`);
  return lines.join('\n');
}
