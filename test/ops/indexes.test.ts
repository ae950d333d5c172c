/**
 * Retention's purge batches and the admin API's pages read an index, never the whole table, on
 * SQLite (EXPLAIN QUERY PLAN, with and without ANALYZE's statistics) and PostgreSQL (EXPLAIN after
 * ANALYZE); and the migration steps that add those indexes upgrade a database at the version before.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { agentMigrations } from '../../src/agent/tables.js';
import { appliedVersion, type Migrations, migrate } from '../../src/db/migrate.js';
import type { Db, Sql } from '../../src/db/types.js';
import { flowMigrations } from '../../src/flows/tables.js';
import { claimable, EVENT_WORK, eventMigrations, readBodyHash } from '../../src/host/event-sql.js';
import { outboxMigrations } from '../../src/host/outbox-sql.js';
import { listApprovalRows, listCredits, listDeadLetters, listEvents, listFlowRuns } from '../../src/ops/admin-lists.js';
import {
  APPROVALS,
  type Cutoffs,
  deleteBatch,
  EVENTS,
  FLOWS,
  OUTBOX,
  type PurgeTarget,
  pickFlows,
  RESERVATIONS,
} from '../../src/ops/retention-sql.js';
import type { Statement } from '../../src/work/index.js';
import { claim, settle } from '../../src/work/sql.js';
import { SELECTED_STORES } from '../support/store-filter.js';
import { type Target, targets } from '../work/support/targets.js';

const COMPONENTS: readonly Migrations[] = [eventMigrations, outboxMigrations, flowMigrations, agentMigrations];
const ROWS = 20_000;
// Row i was received at T0 + i seconds; the cutoffs keep all but the oldest 1% of each table.
const T0 = 1_700_000_000_000;
const CUT = T0 + (ROWS / 100) * 1000;
const CUTOFFS: Cutoffs = {
  events: CUT,
  outbox: CUT,
  flows: CUT,
  approvals: CUT,
  reservations: CUT,
  deadLetters: CUT,
  duplicateFindings: null,
  adminActions: null,
};

/** The version of each component's step that adds these indexes. */
const INDEX_STEP: Record<string, number> = { events: 5, outbox: 4, flows: 3, agent: 2 };

/** A component's migrations before the index step: the database the previous version left. */
const previous = (m: Migrations): Migrations => ({
  ...m,
  steps: m.steps.filter((step) => step.version < (INDEX_STEP[m.component] ?? 0)),
});

// One recursive series serves both dialects; each table gets ROWS rows of mixed statuses and ages.
const SERIES = `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${ROWS})`;
const AT = `(${T0} + i * 1000)`;
const SEED = [
  `INSERT INTO oncely_events (source, event_id, type, payload, body_hash, status, attempts, next_attempt_at,
    received_at, updated_at)
   ${SERIES} SELECT CASE WHEN i % 2 = 0 THEN 'shop' ELSE 'crm' END, 'evt-' || i, 'order.paid', '{}', 'h',
    CASE i % 10 WHEN 0 THEN 'dead' WHEN 1 THEN 'pending' WHEN 2 THEN 'stale' ELSE 'applied' END, 1, ${AT},
    ${AT}, ${AT} + 10 FROM n`,
  `INSERT INTO oncely_outbox (id, topic, payload, status, attempts, next_attempt_at, created_at, delivered_at)
   ${SERIES} SELECT 'msg-' || i, 'note', '{}', CASE i % 100 WHEN 0 THEN 'dead' WHEN 1 THEN 'pending' ELSE 'delivered' END,
    1, ${AT}, ${AT}, CASE WHEN i % 100 > 1 THEN ${AT} + 10 END FROM n`,
  `INSERT INTO oncely_flows (workflow_id, name, biz_id, input, input_hash, status, runs, created_at, updated_at)
   ${SERIES} SELECT 'flow-' || i, 'greet', 'b-' || i, '{}', 'h',
    CASE i % 100 WHEN 0 THEN 'failed' WHEN 1 THEN 'waiting' WHEN 2 THEN 'cancelled' ELSE 'completed' END, 1,
    ${AT}, ${AT} + 10 FROM n`,
  `INSERT INTO oncely_approvals (id, tenant, tool, idempotency_key, content_hash, input, preview, status,
    requested_at, expires_at, decided_by, decided_at)
   ${SERIES} SELECT 'apr-' || i, 't', 'refund', 'k-' || i, 'h', '{}', '{}',
    CASE i % 100 WHEN 0 THEN 'pending' WHEN 1 THEN 'rejected' ELSE 'approved' END, ${AT}, ${AT} + 60000,
    CASE WHEN i % 100 > 0 THEN 'ops' END, CASE WHEN i % 100 > 0 THEN ${AT} + 10 END FROM n`,
  `INSERT INTO oncely_credit_accounts (account, balance) ${SERIES} SELECT 'acct-' || i, 100 FROM n WHERE i <= 500`,
  `INSERT INTO oncely_credit_reservations (action_id, account, credits, status, created_at, expires_at, settled_at)
   ${SERIES} SELECT 'act-' || i, 'acct-' || (i % 500 + 1), 1,
    CASE i % 100 WHEN 0 THEN 'reserved' WHEN 1 THEN 'released' ELSE 'confirmed' END, ${AT}, ${AT} + 60000,
    CASE WHEN i % 100 > 0 THEN ${AT} + 10 END FROM n`,
];

/** The plan of `statement`, one line per node: SQLite's EXPLAIN QUERY PLAN details, PostgreSQL's EXPLAIN text. */
async function plan(db: Sql, statement: Statement): Promise<string> {
  if (db.dialect === 'sqlite') {
    const rows = await db.all<{ detail: string }>(`EXPLAIN QUERY PLAN ${statement.text}`, statement.values);
    return rows.map((r) => r.detail).join('\n');
  }
  const rows = await db.all<{ 'QUERY PLAN': string }>(`EXPLAIN ${statement.text}`, statement.values);
  return rows.map((r) => r['QUERY PLAN']).join('\n');
}

/**
 * Asserts the plan reads `table` (as the plan names it) through each index of `each` and one of
 * `oneOf`, and never scans it whole or sorts all its matches before the LIMIT.
 */
function expectIndexed(
  dialect: 'sqlite' | 'postgres',
  text: string,
  table: string,
  { each = [], oneOf, sorts = false }: { each?: readonly string[]; oneOf?: readonly string[]; sorts?: boolean },
) {
  const where = `${table} plan:\n${text}`;
  const reads = (index: string) =>
    dialect === 'sqlite'
      ? new RegExp(`(SEARCH|SCAN) ${table} USING (COVERING )?INDEX ${index}\\b`).test(text)
      : new RegExp(`(Index|Index Only|Bitmap Index) Scan (Backward )?(using|on) ${index}\\b`).test(text);
  for (const index of each) expect(reads(index), `${index} in ${where}`).toBe(true);
  if (oneOf) expect(oneOf.some(reads), `one of ${oneOf.join(', ')} in ${where}`).toBe(true);
  if (dialect === 'sqlite') {
    // A bare SCAN reads every row; a temp B-tree for the ORDER BY sorts every match before the
    // LIMIT (one for its last term or right part only orders ties of the index's order).
    expect(text, where).not.toMatch(new RegExp(`SCAN ${table}$`, 'm'));
    if (!sorts) expect(text, where).not.toMatch(/TEMP B-TREE FOR ORDER BY/);
  } else {
    expect(text, where).not.toMatch(/Seq Scan/);
    // An incremental sort only orders ties of an index's order, within the LIMIT; a Sort node reads every match.
    expect(text, where).not.toMatch(/(^|->)\s*Sort\s+\(/m);
  }
}

/** A Sql that keeps every listing query the admin API sends (those with an ORDER BY), for EXPLAIN. */
function recording(db: Db): { sql: Sql; seen: Statement[] } {
  const seen: Statement[] = [];
  const sql: Sql = {
    dialect: db.dialect,
    handle: db.handle,
    all: (text, params = []) => {
      if (text.includes('ORDER BY')) seen.push({ text, values: [...params] });
      return db.all(text, params);
    },
    run: (text, params) => db.run(text, params),
  };
  return { sql, seen };
}

/** Each purge batch of retention, with the indexes it must read. */
function purgeBatches(dialect: 'sqlite' | 'postgres'): { table: string; statement: Statement; indexes: string[] }[] {
  const batch = (target: PurgeTarget, indexes: string[]) => {
    const where = target.where(CUTOFFS);
    if (!where) throw new Error(`${target.table} has no purge with these cutoffs`);
    return { table: target.table, statement: deleteBatch(dialect, target.table, where, 1000), indexes };
  };
  const flows = FLOWS.where(CUTOFFS);
  if (!flows) throw new Error('flows have no purge with these cutoffs');
  return [
    batch(EVENTS, ['oncely_events_finished', 'oncely_events_died']),
    batch(OUTBOX, ['oncely_outbox_delivered', 'oncely_outbox_died']),
    batch(APPROVALS, ['oncely_approvals_decided']),
    batch(RESERVATIONS, ['oncely_credit_reservations_settled']),
    { table: 'oncely_flows', statement: pickFlows(dialect, flows, 1000), indexes: ['oncely_flows_finished'] },
  ];
}

/**
 * Every admin page kind: a first page and the page after it, with the table each reads (as a plan
 * names it) and the indexes either planner may pick for it.
 */
const PAGES: {
  name: string;
  table: string;
  indexes: string[];
  /** SQLite reads an index but sorts what it matched (the page of one source). */
  sortsOnSqlite?: true;
  list: (sql: Sql, cursor?: string) => Promise<{ cursor: string | null }>;
}[] = [
  {
    name: 'events',
    table: 'oncely_events',
    indexes: ['oncely_events_received'],
    list: (sql, cursor) => listEvents(sql, { limit: 50, cursor }),
  },
  {
    // SQLite takes the primary key and sorts the source's rows: no index leads with the source
    // (PostgreSQL took it for key lookups of a source its statistics did not know).
    name: 'events of a source',
    table: 'oncely_events',
    indexes: ['oncely_events_received', 'sqlite_autoindex_oncely_events_1'],
    sortsOnSqlite: true,
    list: (sql, cursor) => listEvents(sql, { source: 'shop', limit: 50, cursor }),
  },
  {
    // No whole index leads with the status (the claim would take it): the newest-first one is walked,
    // or, for pending events, the open index, ordered the same.
    name: 'events of a status',
    table: 'oncely_events',
    indexes: ['oncely_events_received', 'oncely_events_open'],
    list: (sql, cursor) => listEvents(sql, { status: 'pending', limit: 50, cursor }),
  },
  {
    name: 'events of a status and a source',
    table: 'oncely_events',
    indexes: ['oncely_events_received', 'sqlite_autoindex_oncely_events_1'],
    sortsOnSqlite: true,
    list: (sql, cursor) => listEvents(sql, { status: 'applied', source: 'crm', limit: 50, cursor }),
  },
  {
    name: 'dead letters',
    table: 'oncely_events',
    indexes: ['oncely_events_dead_letters'],
    list: (sql, cursor) => listDeadLetters(sql, { limit: 50, cursor }),
  },
  {
    name: 'dead letters of a source',
    table: 'oncely_events',
    indexes: ['oncely_events_dead_letters'],
    list: (sql, cursor) => listDeadLetters(sql, { source: 'shop', limit: 50, cursor }),
  },
  {
    name: 'flows',
    table: 'oncely_flows',
    indexes: ['oncely_flows_created'],
    list: (sql, cursor) => listFlowRuns(sql, { limit: 50, cursor }),
  },
  {
    name: 'flows of a status',
    table: 'oncely_flows',
    indexes: ['oncely_flows_status'],
    list: (sql, cursor) => listFlowRuns(sql, { status: 'waiting', limit: 50, cursor }),
  },
  {
    name: 'approvals',
    table: 'oncely_approvals',
    indexes: ['oncely_approvals_requested'],
    list: (sql, cursor) => listApprovalRows(sql, { limit: 50, cursor }),
  },
  {
    name: 'approvals of a status',
    table: 'oncely_approvals',
    indexes: ['oncely_approvals_status'],
    list: (sql, cursor) => listApprovalRows(sql, { status: 'pending', limit: 50, cursor }),
  },
  {
    // The page walks the accounts' primary key; each account's held credits are summed by the index.
    name: 'credits',
    table: 'r',
    indexes: ['oncely_credit_reservations_held'],
    list: (sql, cursor) => listCredits(sql, { limit: 50, cursor }),
  },
];

const STATISTICS = { sqlite: [false, true], postgres: [true] } as const;
/** The dialects ONCELY_STORES selects. */
const DIALECTS = (['sqlite', 'postgres'] as const).filter((dialect) => SELECTED_STORES.has(dialect));

for (const dialect of DIALECTS)
  for (const analyzed of STATISTICS[dialect])
    describe(`indexes on ${dialect}${analyzed ? ' after ANALYZE' : ' without statistics'}`, () => {
      let target: Target;
      let db: Db;
      beforeAll(async () => {
        target = targets[dialect]();
        db = await target.open();
        for (const component of COMPONENTS) await migrate(db, component);
        for (const statement of SEED) await db.run(statement);
        if (analyzed) await db.run('ANALYZE');
      }, 60_000);
      afterAll(async () => {
        await db.close();
        await target.dispose();
      });

      for (const { table, statement, indexes } of purgeBatches(dialect))
        it(`a purge batch of ${table} reads ${indexes.join(' and ')}`, async () => {
          expectIndexed(dialect, await plan(db, statement), table, { each: indexes });
        });

      it('an events claim still walks the open index in order, however many rows the new indexes hold', async () => {
        const now = T0 + ROWS * 1000;
        const statement = claim(EVENT_WORK, dialect, claimable(now), now, now + 30_000, 32);
        expectIndexed(dialect, await plan(db, statement), 'oncely_events', { each: ['oncely_events_open'] });
      });

      // Of a source the statistics do not know: an index led by it would look cheaper to PostgreSQL
      // than the key, and read every row of that source. (A flow's fenced write, of a status no row
      // had at ANALYZE, reads oncely_flows_due there, an index older than these.)
      it('a key lookup of an event or an approval reads the primary key', async () => {
        const primary = (table: string) => (dialect === 'sqlite' ? `sqlite_autoindex_${table}_1` : `${table}_pkey`);
        const lookups: [string, Statement][] = [
          ['oncely_events', readBodyHash('new-source', 'evt-1')],
          ['oncely_events', settle(EVENT_WORK, ['new-source', 'evt-1'], 1, 'applied', {}, T0)],
          [
            'oncely_approvals',
            {
              text: `UPDATE oncely_approvals SET status = ?, decided_by = ?, decided_at = ?, reason = ?
                WHERE id = ? AND status = 'pending' AND expires_at > ?`,
              values: ['approved', 'ops', T0, null, 'apr-100', T0],
            },
          ],
        ];
        for (const [table, statement] of lookups)
          expectIndexed(dialect, await plan(db, statement), table, { each: [primary(table)] });
      });

      for (const page of PAGES)
        it(`a page of ${page.name}, the first and the next, reads ${page.indexes.join(' or ')}`, async () => {
          const { sql, seen } = recording(db);
          const first = await page.list(sql);
          expect(first.cursor).not.toBeNull();
          await page.list(sql, first.cursor ?? undefined);
          expect(seen).toHaveLength(2);
          for (const statement of seen)
            expectIndexed(dialect, await plan(db, statement), page.table, {
              oneOf: page.indexes,
              sorts: page.sortsOnSqlite === true,
            });
        });
    });

for (const dialect of DIALECTS)
  describe(`the index migrations on ${dialect}`, () => {
    let target: Target;
    let db: Db;
    afterEach(async () => {
      await db.close();
      await target.dispose();
    });

    it('upgrade a database at the previous version: its rows are kept, its purges and pages read the indexes', async () => {
      target = targets[dialect]();
      db = await target.open();
      for (const component of COMPONENTS) await migrate(db, previous(component));
      for (const statement of SEED) await db.run(statement);
      if (dialect === 'postgres') await db.run('ANALYZE');
      // Before: each purge batch reads its table whole (what the new steps fix, and what the checks
      // catch), but the flows' one: SQLite takes oncely_flows_due there, every flow of those statuses.
      for (const { table, statement } of purgeBatches(dialect).filter((b) => b.table !== 'oncely_flows'))
        expect(await plan(db, statement)).toMatch(
          dialect === 'sqlite' ? new RegExp(`SCAN ${table}$`, 'm') : new RegExp(`Seq Scan on ${table}`),
        );
      expect(await indexNames(db)).toContain('oncely_events_dead');

      for (const component of COMPONENTS) await migrate(db, component);
      if (dialect === 'postgres') await db.run('ANALYZE');
      for (const component of COMPONENTS)
        expect(await appliedVersion(db, component.component)).toBe(component.steps.length);
      const names = await indexNames(db);
      for (const { indexes } of purgeBatches(dialect)) for (const index of indexes) expect(names).toContain(index);
      for (const page of PAGES)
        for (const index of page.indexes.filter((i) => i.startsWith('oncely_'))) expect(names).toContain(index);
      // The dead letters' index covers the dead-only one it replaces.
      expect(names).not.toContain('oncely_events_dead');
      for (const table of ['oncely_events', 'oncely_outbox', 'oncely_flows', 'oncely_approvals'])
        expect(await count(db, table)).toBe(ROWS);
      for (const { table, statement, indexes } of purgeBatches(dialect))
        expectIndexed(dialect, await plan(db, statement), table, { each: indexes });
    }, 60_000);
  });

async function indexNames(db: Db): Promise<string[]> {
  const rows =
    db.dialect === 'sqlite'
      ? await db.all<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'index'")
      : await db.all<{ name: string }>('SELECT indexname AS name FROM pg_indexes WHERE schemaname = current_schema()');
  return rows.map((r) => r.name);
}

async function count(db: Db, table: string): Promise<number> {
  const [row] = await db.all<{ n: number | string }>(`SELECT COUNT(*) AS n FROM ${table}`);
  return Number(row?.n);
}
