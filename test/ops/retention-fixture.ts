/**
 * What the retention tests share: a fresh database per test with every table retention knows,
 * rows of every table in every state, old and new, and the ids each table holds.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { migrateAgentTables } from '../../src/agent/tables.js';
import { openDb } from '../../src/db/index.js';
import type { Db } from '../../src/db/types.js';
import { migrateFlowTables } from '../../src/flows/tables.js';
import type { App } from '../../src/host/app.js';
import type { HostConfig } from '../../src/host/config.js';
import { createHost, type Host } from '../../src/host/host.js';
import { recordStoreFor } from '../../src/host/records.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { selectStores } from '../support/store-filter.js';

export const DAY = 86_400_000;

/** A fresh database of each kind: a new SQLite file, a new PostgreSQL schema (dropped by cleanup). */
export const DATABASES = selectStores([
  {
    name: 'sqlite',
    fresh: () => ({
      target: join(mkdtempSync(join(tmpdir(), 'oncely-retention-')), 'app.db'),
      cleanup: async () => {},
    }),
  },
  {
    name: 'postgres',
    fresh: () => {
      const schema = freshSchema();
      return { target: `${POSTGRES_URL}?schema=${schema}`, cleanup: () => dropSchema(schema) };
    },
  },
] as const);

/** An app with no handlers, for a host whose tables the tests fill by hand. */
export function emptyApp(config: HostConfig = {}): App {
  return { dir: tmpdir(), config, schemaSql: '', handlers: new Map(), consumers: new Map(), flows: [] };
}

/** A migrated host (not started: no scheduled purge) on `target`, with the flow and agent tables too. */
export async function migratedHost(target: string, config: HostConfig = {}): Promise<{ host: Host; db: Db }> {
  const db = await openDb(target, { poolSize: 4 });
  const host = await createHost(emptyApp(config), db, recordStoreFor(db));
  await host.migrate();
  await migrateFlowTables(db);
  await migrateAgentTables(db);
  return { host, db };
}

/** Each table's ids, as `ids` reads them, by what a purge with the default retentions does to them. */
export type Planted = Record<string, { purged: string[]; kept: string[] }>;

/** How each table's ids are read (one text per row). */
const ID_OF: Record<string, string> = {
  oncely_records: 'key',
  oncely_events: 'event_id',
  oncely_outbox: 'id',
  oncely_flows: 'workflow_id',
  oncely_flow_steps: "workflow_id || '/' || step_id",
  oncely_flow_signals: "workflow_id || '/' || signal_id",
  oncely_approvals: 'id',
  oncely_credit_reservations: 'action_id',
  oncely_credit_accounts: 'account',
  oncely_event_versions: 'aggregate',
  oncely_duplicate_findings: 'business_key',
  oncely_admin_actions: 'target',
};

/** The tables the fixture fills. */
export const TABLES = Object.keys(ID_OF);

/** The ids `table` holds now, sorted. */
export async function ids(db: Db, table: string): Promise<string[]> {
  const rows = await db.all<{ id: string }>(`SELECT ${ID_OF[table]} AS id FROM ${table}`);
  return rows.map((r) => String(r.id)).sort();
}

/**
 * Rows of every table in every state, each once old (400 days: past every default retention) and
 * once new (an hour), named `<state>-old` / `<state>-new`. Records come from the host's engine.
 */
export async function plant(host: Host, db: Db, now = Date.now()): Promise<Planted> {
  const at = { old: now - 400 * DAY, new: now - 3_600_000 };
  const planted: Planted = {};
  const put = (table: string, id: string, purged: boolean) => {
    planted[table] ??= { purged: [], kept: [] };
    planted[table][purged ? 'purged' : 'kept'].push(id);
  };
  const gone = (state: string, age: 'old' | 'new', finished: readonly string[]) =>
    age === 'old' && finished.includes(state);

  for (const age of ['old', 'new'] as const) {
    const t = at[age];
    for (const status of ['pending', 'processing', 'applied', 'stale', 'no_consumer', 'dead']) {
      const id = `${status}-${age}`;
      await db.run(
        `INSERT INTO oncely_events (source, event_id, type, payload, status, attempts, next_attempt_at, lease_until, received_at, updated_at)
         VALUES ('shop', ?, 'order.paid', '{}', ?, 0, ?, ?, ?, ?)`,
        [id, status, t, status === 'processing' ? now + 60_000 : null, t, t],
      );
      put('oncely_events', id, gone(status, age, ['applied', 'stale', 'no_consumer']));
    }
    for (const status of ['pending', 'delivering', 'delivered', 'dead']) {
      const id = `${status}-${age}`;
      await db.run(
        `INSERT INTO oncely_outbox (id, topic, payload, status, next_attempt_at, created_at, delivered_at)
         VALUES (?, 'order.paid', '{}', ?, ?, ?, ?)`,
        [id, status, t, t, status === 'delivered' ? t : null],
      );
      put('oncely_outbox', id, gone(status, age, ['delivered']));
    }
    for (const status of ['pending', 'running', 'waiting', 'completed', 'failed', 'cancelled']) {
      const id = `${status}-${age}`;
      await db.run(
        `INSERT INTO oncely_flows (workflow_id, name, biz_id, input, input_hash, status, created_at, updated_at)
         VALUES (?, 'fulfil', ?, '{}', 'h', ?, ?, ?)`,
        [id, id, status, t, t],
      );
      // A failed flow is a dead letter: kept by default (its retry reruns only its failed step).
      const purged = gone(status, age, ['completed', 'cancelled']);
      put('oncely_flows', id, purged);
      for (const step of ['charge', 'ship']) {
        await db.run(
          `INSERT INTO oncely_flow_steps (workflow_id, step_id, status, attempts, started_at, completed_at)
           VALUES (?, ?, 'completed', 1, ?, ?)`,
          [id, step, t, t],
        );
        put('oncely_flow_steps', `${id}/${step}`, purged);
      }
      await db.run(
        `INSERT INTO oncely_flow_signals (workflow_id, signal_id, name, payload, received_at) VALUES (?, 's1', 'paid', '{}', ?)`,
        [id, t],
      );
      put('oncely_flow_signals', `${id}/s1`, purged);
    }
    for (const status of ['pending', 'approved', 'rejected', 'expired']) {
      const id = `${status}-${age}`;
      // A pending approval past its expiry is still pending (nobody looked): it stays.
      await db.run(
        `INSERT INTO oncely_approvals (id, tenant, tool, idempotency_key, content_hash, input, preview, status, requested_at, expires_at, decided_by, decided_at)
         VALUES (?, 'default', 'refund', ?, 'h', '{}', '{}', ?, ?, ?, ?, ?)`,
        [id, id, status, t, t + 60_000, status === 'pending' ? null : 'ops', status === 'pending' ? null : t],
      );
      put('oncely_approvals', id, gone(status, age, ['approved', 'rejected', 'expired']));
    }
    for (const status of ['reserved', 'confirmed', 'released']) {
      const id = `${status}-${age}`;
      await db.run(
        `INSERT INTO oncely_credit_reservations (action_id, account, credits, status, created_at, expires_at, settled_at)
         VALUES (?, 'acct', 5, ?, ?, ?, ?)`,
        [id, status, t, t + 60_000, status === 'reserved' ? null : t],
      );
      put('oncely_credit_reservations', id, gone(status, age, ['confirmed', 'released']));
    }
    await db.run(
      `INSERT INTO oncely_duplicate_findings (table_name, business_key, count, first_seen, last_seen) VALUES ('ledger', ?, 2, ?, ?)`,
      [`finding-${age}`, t, t],
    );
    put('oncely_duplicate_findings', `finding-${age}`, age === 'old');
    await db.run(
      `INSERT INTO oncely_admin_actions (at, who, action, target, outcome, detail) VALUES (?, 'token', 'records.resolve', ?, 'done', '{}')`,
      [t, `action-${age}`],
    );
    put('oncely_admin_actions', `action-${age}`, age === 'old');
    // Balances and the versions that order an aggregate's events: never purged, however old.
    await db.run('INSERT INTO oncely_credit_accounts (account, balance) VALUES (?, 10)', [`account-${age}`]);
    put('oncely_credit_accounts', `account-${age}`, false);
    await db.run('INSERT INTO oncely_event_versions (aggregate, version) VALUES (?, 1)', [`order-${age}`]);
    put('oncely_event_versions', `order-${age}`, false);
  }

  // Records: one expired, one live, and two past their expiry that must stay (unknown, a live claim).
  for (const key of ['expired', 'live', 'unknown', 'claimed'])
    await host.once.run({ action: 'charge', key: `rec-${key}`, ttl: '1d' }, () => ({ ok: key }));
  await db.run("UPDATE oncely_records SET expires_at = ? WHERE key = 'rec-expired'", [now - DAY]);
  await db.run("UPDATE oncely_records SET state = 'unknown', expires_at = ? WHERE key = 'rec-unknown'", [now - DAY]);
  await db.run(
    "UPDATE oncely_records SET state = 'in_progress', lease_until = ?, expires_at = ? WHERE key = 'rec-claimed'",
    [now + 3_600_000, now - DAY],
  );
  planted.oncely_records = { purged: ['rec-expired'], kept: ['rec-claimed', 'rec-live', 'rec-unknown'] };
  return planted;
}
