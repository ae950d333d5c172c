import { existsSync } from 'node:fs';
import { userInfo } from 'node:os';
import type { Command } from 'commander';
import type { Duration, Ttl } from '../core/duration.js';
import { InvalidArgumentError, OncelyError } from '../core/errors.js';
import { loadPeer } from '../core/peer.js';
import { type PublicRecord, parseRecordRef, type RecordId, type RecordState, recordRef } from '../core/record.js';
import { checkUrl } from '../core/url.js';
import { loadSqliteDriver } from '../db/sqlite.js';
import type { ListOptions, Oncely, RecordList, Resolution } from '../engine/engine.js';
import { storedResolution } from '../host/reconciler.js';

/** Where the records are: `--db` (a SQLite file or a postgres:// URL, the host's table) or `--store` (Redis). */
interface StoreOptions {
  db?: string;
  store?: string;
  schema?: string;
  prefix: string;
}

interface ListFlags extends StoreOptions {
  state?: string;
  action?: string;
  tenant?: string;
  olderThan?: string;
  limit: string;
  cursor?: string;
  json?: boolean;
}

interface ResolveFlags extends StoreOptions {
  value?: string;
  error?: string;
  retry?: boolean;
  by?: string;
  note?: string;
  ttl?: string;
}

// The table the host keeps its records in (host/records.ts): what `--db` points at.
const HOST_TABLE = 'oncely_records';
const POSTGRES_URL = /^postgres(ql)?:\/\//;

/** Adds `records list|show|resolve` to the CLI: find, read and settle records without loading an app. */
export function addRecordCommands(program: Command): void {
  const records = program
    .command('records')
    .description('list, show and settle idempotency records in a database (--db) or Redis (--store)');

  storeOptions(records.command('list').description('one page of records matching the filters, across tenants'))
    .option('--state <state>', 'in_progress, succeeded, failed, released or unknown')
    .option('--action <action>', 'only this action')
    .option('--tenant <tenant>', 'only this tenant (default: every tenant)')
    .option('--older-than <duration>', "only records last written at least this long ago ('10m')")
    .option('--limit <n>', 'most records in the page, 1 to 1000', '100')
    .option('--cursor <cursor>', 'the cursor the previous page printed')
    .option('--json', 'print { records, cursor } as JSON')
    .action(async (flags: ListFlags) => {
      const page = await withOncely(flags, (once) => once.list(listOptions(flags)));
      console.log(flags.json ? JSON.stringify(page, null, 2) : listText(page, Number(flags.limit), Date.now()));
    });

  storeOptions(records.command('show').description('one record by its id'))
    .argument('<id>', 'tenant/action/key, each part percent-encoded as `records list` prints it')
    .option('--json', 'print the record as JSON')
    .action(async (ref: string, flags: StoreOptions & { json?: boolean }) => {
      const id = recordId(ref);
      const record = await withOncely(flags, (once) => once.get(id));
      if (!record) throw new OncelyError('NOT_FOUND', `no record ${ref}`);
      console.log(flags.json ? JSON.stringify(record, null, 2) : showText(record, Date.now()));
    });

  storeOptions(records.command('resolve').description('settle an unknown or stalled record, recording who did'))
    .argument('<id>', 'tenant/action/key, as `records list` prints it')
    .option('--value <json>', 'store this value as the outcome: replays answer it')
    .option('--error <json>', 'store this failure ({ "message": ..., "code"?: ... }): replays throw it')
    .option('--retry', 'release the key: the next caller executes again')
    .option('--by <who>', 'who settles it, kept on the record (default: your user name)')
    .option('--note <text>', "kept with the settlement: the downstream's reference, a ticket")
    .option('--ttl <duration>', "how long the stored outcome answers replays ('24h', 'permanent'; default 24h)")
    .action(async (ref: string, flags: ResolveFlags) => {
      const id = recordId(ref);
      const resolution = resolutionOf(flags);
      const options = {
        tenant: id.tenant,
        by: flags.by ?? settler(),
        ...(flags.note !== undefined ? { note: flags.note } : {}),
        ...(flags.ttl !== undefined ? { ttl: flags.ttl as Ttl } : {}),
      };
      const record = await withOncely(flags, (once) =>
        once.resolve(id.action, id.key, storedResolution(id.action, resolution), options),
      );
      console.log(recordLine(record, Date.now()));
    });
}

function storeOptions(command: Command): Command {
  return command
    .option('--db <target>', `a SQLite file or a postgres:// URL: the app database's ${HOST_TABLE}`)
    .option('--schema <schema>', 'with a postgres --db: the schema of the records (default: public)')
    .option('--store <url>', 'a redis:// URL: the records of a Redis store')
    .option('--prefix <prefix>', 'with --store: the key prefix of the Redis store', 'oncely:');
}

/** Runs `fn` on an engine over the store the options name, then closes both. */
async function withOncely<T>(options: StoreOptions, fn: (once: Oncely) => Promise<T>): Promise<T> {
  const [{ createOncely }, store] = await Promise.all([import('../engine/engine.js'), openStore(options)]);
  const once = await createOncely({ store }).catch(async (error: unknown) => {
    await store.close();
    throw error;
  });
  try {
    return await fn(once);
  } finally {
    // Closes the store too.
    await once.close();
  }
}

async function openStore(options: StoreOptions) {
  const { db, store, schema } = options;
  if ((db === undefined) === (store === undefined))
    throw new InvalidArgumentError('give the records as --db <sqlite path | postgres url> or --store <redis url>');
  if (schema !== undefined && (store !== undefined || !POSTGRES_URL.test(db as string)))
    throw new InvalidArgumentError('--schema applies to a postgres --db only');
  if (store !== undefined) {
    if (!/^rediss?:\/\//.test(store)) throw new InvalidArgumentError(`--store must be a redis:// URL, got ${store}`);
    const { redisStore } = await import('../redis/index.js');
    return redisStore({ url: store, prefix: options.prefix });
  }
  const target = db as string;
  if (POSTGRES_URL.test(target)) return postgresRecords(target, schema);
  // Opening a missing path would create an empty file: a typo must not leave one behind.
  if (!existsSync(target)) throw new InvalidArgumentError(`no database at ${target}`);
  const [Database, { sqliteStore }] = await Promise.all([
    loadSqliteDriver('a SQLite --db'),
    import('../sqlite/index.js'),
  ]);
  const probe = new Database(target, { readonly: true, fileMustExist: true });
  try {
    if (!probe.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?").get(HOST_TABLE))
      throw notMigrated(target);
  } finally {
    probe.close();
  }
  return sqliteStore({ path: target });
}

/** The host's records table in a PostgreSQL schema (a `?schema=` of the URL, as `--db` takes it elsewhere, or --schema). */
async function postgresRecords(target: string, schema: string | undefined) {
  const url = checkUrl(target, '--db');
  const named = schema ?? url.searchParams.get('schema') ?? 'public';
  url.searchParams.delete('schema');
  const { postgresStore } = await import('../postgres/index.js');
  const store = postgresStore({ connectionString: url.toString(), schema: named, table: HOST_TABLE });
  // The store would create a schema and table that are missing: a wrong --schema must say so instead.
  const pg = await loadPeer(() => import('pg'), 'a postgres:// --db', ['pg']);
  const client = new (pg.default ?? pg).Client({ connectionString: url.toString() });
  try {
    await client.connect();
    const { rows } = await client.query('SELECT to_regclass($1) IS NOT NULL AS found', [`"${named}"."${HOST_TABLE}"`]);
    if (!(rows[0] as { found: boolean }).found) throw notMigrated(`${target} (schema ${named})`);
  } catch (error) {
    await store.close();
    throw error;
  } finally {
    await client.end();
  }
  return store;
}

const notMigrated = (where: string) =>
  new OncelyError('NOT_MIGRATED', `no oncely records in ${where}: run oncely migrate or serve on it first`);

function listOptions(flags: ListFlags): ListOptions {
  const limit = Number(flags.limit);
  return {
    limit,
    ...(flags.state !== undefined ? { state: flags.state as RecordState } : {}),
    ...(flags.action !== undefined ? { action: flags.action } : {}),
    ...(flags.tenant !== undefined ? { tenant: flags.tenant } : {}),
    ...(flags.olderThan !== undefined ? { olderThan: flags.olderThan as Duration } : {}),
    ...(flags.cursor !== undefined ? { cursor: flags.cursor } : {}),
  };
}

function recordId(ref: string): RecordId {
  const id = parseRecordRef(ref);
  if (!id) throw new InvalidArgumentError(`${ref} is not a record id: tenant/action/key, each part percent-encoded`);
  return id;
}

function resolutionOf(flags: ResolveFlags): Resolution {
  const given = [flags.value !== undefined, flags.error !== undefined, flags.retry === true].filter(Boolean).length;
  if (given !== 1) throw new InvalidArgumentError('give exactly one of --value <json>, --error <json> or --retry');
  if (flags.retry) return 'retry';
  if (flags.value !== undefined) return { value: json(flags.value, '--value') };
  const error = json(flags.error as string, '--error') as { message?: unknown; name?: unknown; code?: unknown };
  if (typeof error !== 'object' || error === null || typeof error.message !== 'string')
    throw new InvalidArgumentError('--error must be a JSON object with a "message" string');
  for (const field of ['name', 'code'] as const)
    if (error[field] !== undefined && typeof error[field] !== 'string')
      throw new InvalidArgumentError(`--error's "${field}" must be a string`);
  return { error: error as { message: string; name?: string; code?: string } };
}

function json(text: string, flag: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new InvalidArgumentError(`${flag} must be JSON (a string needs its quotes: '"ok"')`);
  }
}

function settler(): string {
  try {
    return userInfo().username || 'person';
  } catch {
    // No user name where the process runs (a container with a bare uid).
    return 'person';
  }
}

/**
 * A page as lines: one per record, then where the next page starts. A short page with a cursor is
 * a Redis scan that ran out of its time budget in a large keyspace: said so, so that nobody takes
 * it for every match.
 */
function listText(page: RecordList, limit: number, now: number): string {
  const lines = page.records.map((record) => recordLine(record, now));
  if (page.cursor && page.records.length < limit)
    lines.push(`${page.records.length} so far: the scan stopped at its time budget; more may match on the next page`);
  else if (lines.length === 0) lines.push('no records');
  lines.push(page.cursor ? `next page: --cursor ${page.cursor}` : 'end of the records');
  return lines.join('\n');
}

/** One record on one line: id, state, attempts, age, last write, and who settled it. */
function recordLine(record: PublicRecord, now: number): string {
  const parts = [
    recordRef(record),
    record.state,
    `attempts ${record.attempts}`,
    `age ${age(now - record.createdAt)}`,
    `updated ${new Date(record.updatedAt).toISOString()}`,
  ];
  const settled = record.settlement;
  if (settled)
    parts.push(
      `settled ${settled.answer} by ${settled.by} at ${new Date(settled.at).toISOString()}` +
        (settled.note ? ` (${settled.note})` : ''),
    );
  return parts.join('  ');
}

function showText(record: PublicRecord, now: number): string {
  const time = (ms: number | null) => (ms === null ? '-' : new Date(ms).toISOString());
  return [
    recordLine(record, now),
    `  tenant ${record.tenant}, action ${record.action}, key ${record.key}`,
    `  fingerprint ${record.fingerprint}, fence ${record.fence}, trace ${record.traceId}`,
    `  created ${time(record.createdAt)}, lease until ${time(record.leaseUntil)}, completed ${time(record.completedAt)}, expires ${time(record.expiresAt)}`,
  ].join('\n');
}

/** A duration in the two largest units that apply: '850ms', '42s', '5m12s', '3h4m', '2d1h'. */
function age(ms: number): string {
  if (ms < 1_000) return `${Math.max(0, Math.floor(ms))}ms`;
  const units: [string, number][] = [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1_000],
  ];
  const first = units.findIndex(([, size]) => ms >= size);
  const [unit, size] = units[first] as [string, number];
  const next = units[first + 1];
  const whole = Math.floor(ms / size);
  const rest = next ? Math.floor((ms - whole * size) / next[1]) : 0;
  return next && rest > 0 ? `${whole}${unit}${rest}${next[0]}` : `${whole}${unit}`;
}
