/**
 * The reconciler of `oncely serve`, on SQLite and PostgreSQL: a handler module exporting
 * `reconcile` has its stalled record settled by the scheduled pass with no one asking, and a
 * duplicate invocation replays the envelope the handler would have answered; the record of a
 * handler without one stays for a person and shows in the gauge on GET /metrics. The app's
 * `reconcile` exports are loaded from a folder and a bad one is refused. On SQLite the passes'
 * writes wait for a handler's open transaction instead of landing in it; `resolve` joins a
 * caller's transaction (`tx`) on both databases.
 */
import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { StoredRecord } from '../../src/core/record.js';
import { openDb } from '../../src/db/index.js';
import { loadApp } from '../../src/host/app.js';
import { recordStoreFor } from '../../src/host/records.js';
import { createOncely, type RecordStore } from '../../src/index.js';
import { postgresStore } from '../../src/postgres/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';
import { hostTargets, sleep, startHost } from '../support/host-app.js';
import { POSTGRES_URL } from '../support/postgres.js';
import { until } from '../support/wait.js';

/** A store on the host's records table through a connection of its own: what another process sees. */
function recordsOf(target: string): RecordStore {
  if (!target.startsWith('postgres')) return sqliteStore({ path: target });
  const schema = new URL(target).searchParams.get('schema') ?? 'public';
  return postgresStore({ connectionString: POSTGRES_URL, schema, table: 'oncely_records' });
}

/** A claim whose holder died ten minutes ago, as it stays under 'hold'. */
function stalled(action: string, key: string, fingerprint: string): StoredRecord {
  const at = Date.now() - 600_000;
  return {
    tenant: 'default',
    action,
    key,
    state: 'in_progress',
    fingerprint,
    fence: 1,
    attempts: 1,
    leaseUntil: at + 30_000,
    result: null,
    traceId: randomUUID(),
    createdAt: at,
    updatedAt: at,
    completedAt: null,
    expiresAt: null,
  };
}

for (const { name, target: makeTarget, cleanup } of hostTargets()) {
  describe(`oncely serve's reconciler on ${name}`, () => {
    afterAll(cleanup);

    it('settles a handler’s stalled record by itself; a handler without reconcile leaves its record in the gauge', async () => {
      const target = makeTarget();
      const asked: string[] = [];
      const running = await startHost(target, {
        config: { reconcile: { every: '100ms', olderThan: '1s' } },
        handlers: {
          'orders.charge': {
            handle: (input) => ({ charged: (input as { amount: number }).amount, by: 'handler' }),
            reconcile: (record) => {
              asked.push(record.key);
              return { value: { charged: 4_200, by: 'gateway' } };
            },
          },
          'orders.refund': { handle: () => ({ refunded: true }) },
        },
      });
      const records = recordsOf(target);
      try {
        // A real invocation's record gives the fingerprint a duplicate of the same body will carry.
        const body = { amount: 4_200 };
        expect((await running.invoke('orders.charge', body, { 'idempotency-key': 'probe' })).status).toBe(200);
        const probe = await running.host.once.get({ tenant: 'default', action: 'POST orders.charge', key: 'probe' });
        const print = probe?.fingerprint as string;
        await records.insertOrGet(stalled('POST orders.charge', 'ORD-9', print));
        await records.insertOrGet(stalled('POST orders.refund', 'RF-1', print));

        const settled = await until(
          'the reconciler to settle ORD-9',
          () => records.get({ tenant: 'default', action: 'POST orders.charge', key: 'ORD-9' }),
          (record) => record?.state === 'succeeded',
        );
        expect(settled).toMatchObject({ state: 'succeeded', settlement: { by: 'reconciler', answer: 'value' } });
        expect(asked).toEqual(['ORD-9']);

        const again = await running.invoke('orders.charge', body, { 'idempotency-key': 'ORD-9' });
        expect(again.status).toBe(200);
        expect(again.headers.get('idempotent-replayed')).toBe('true');
        expect(again.body).toMatchObject({ code: 0, data: { charged: 4_200, by: 'gateway' } });

        // The refund has no reconcile: it stays, counted as awaiting a person.
        expect(await records.get({ tenant: 'default', action: 'POST orders.refund', key: 'RF-1' })).toMatchObject({
          state: 'in_progress',
        });
        // The gauge is set by each pass: the pass that settled ORD-9 may have listed before RF-1 was inserted.
        const awaiting = 'oncely_records_awaiting{action="POST orders.refund",state="in_progress"} 1';
        const metrics = await until(
          `GET /metrics to show ${awaiting}`,
          async () => (await fetch(`${running.base}/metrics`)).text(),
          (text) => text.includes(awaiting),
        );
        expect(metrics).toContain(awaiting);
        expect(metrics).toMatch(
          /oncely_reconciled_total\{action="POST orders.charge",answer="value",settler="reconciler"\} 1\b/,
        );
        const report = await running.host.reconcile();
        expect(report).toMatchObject({
          settled: [],
          awaiting: [{ action: 'POST orders.refund', state: 'in_progress', count: 1 }],
        });
      } finally {
        await records.close();
        await running.stop();
      }
    });

    it('reconcile: false runs no pass by itself; host.reconcile still does', async () => {
      const target = makeTarget();
      const running = await startHost(target, {
        config: { reconcile: false },
        handlers: { 'orders.charge': { handle: () => ({}), reconcile: () => 'retry' } },
      });
      const records = recordsOf(target);
      try {
        await records.insertOrGet(stalled('POST orders.charge', 'ORD-1', 'x'));
        // sleep: proving no pass runs: a scheduled one would settle this ten-minute-old claim within the window.
        await sleep(300);
        const id = { tenant: 'default', action: 'POST orders.charge', key: 'ORD-1' };
        expect(await records.get(id)).toMatchObject({ state: 'in_progress' });
        expect((await running.host.reconcile({ olderThan: 0 })).settled).toHaveLength(1);
        expect(await records.get(id)).toMatchObject({ state: 'released', settlement: { by: 'reconciler' } });
      } finally {
        await records.close();
        await running.stop();
      }
    });
  });
}

for (const { name, target: makeTarget, cleanup } of hostTargets()) {
  describe(`resolve in a caller's transaction on ${name}`, () => {
    afterAll(cleanup);

    it('is rolled back with it and committed with it', async () => {
      const target = makeTarget();
      // A host's migrate makes the records table; this engine then shares the Db as the host's does.
      await (await startHost(target, {})).stop();
      const db = await openDb(target);
      const once = await createOncely({ store: recordStoreFor(db), tenant: 'default' });
      const records = recordsOf(target);
      try {
        const id = { tenant: 'default', action: 'POST orders.charge', key: 'ORD-1' };
        await records.insertOrGet(stalled(id.action, id.key, 'x'));
        const resolve = (tx: { handle: unknown }) =>
          once.resolve(id.action, id.key, 'retry', { by: 'ops', tx: tx.handle });
        await expect(
          db.transaction(async (tx) => {
            await resolve(tx);
            throw new Error('rolled back');
          }),
        ).rejects.toThrow('rolled back');
        expect(await records.get(id)).toMatchObject({ state: 'in_progress' });
        await db.transaction(resolve);
        expect(await records.get(id)).toMatchObject({ state: 'released', settlement: { by: 'ops' } });
      } finally {
        await records.close();
        await once.close();
        await db.close();
      }
    });
  });
}

// SQLite only: its one writer is what the passes must wait for.
for (const sqlite of hostTargets().filter(({ name }) => name === 'sqlite'))
  describe('the reconciler beside an open handler transaction on SQLite', () => {
    it('settles records while a handler holds its transaction open; the handler commits all it wrote', async () => {
      const target = sqlite.target();
      const running = await startHost(target, {
        // Records planted now become due 300 ms later, while the handler below holds its transaction.
        config: { reconcile: { every: '20ms', olderThan: '300ms' } },
        schemaSql: 'CREATE TABLE IF NOT EXISTS marks (id TEXT PRIMARY KEY, note TEXT NOT NULL)',
        handlers: {
          'work.slow': {
            async handle(_input, ctx) {
              await ctx.store.createIfAbsent('marks', { id: 'before', note: 'x' }, ['id']);
              // sleep: the handler holds its transaction open for a while, the window the passes must wait out.
              await sleep(600);
              await ctx.store.createIfAbsent('marks', { id: 'after', note: 'x' }, ['id']);
              return { ok: true };
            },
          },
          'orders.charge': { handle: () => ({}), reconcile: () => 'retry' },
        },
      });
      // Planted through a connection of the test's own before the handler's transaction takes the write lock.
      const records = recordsOf(target);
      try {
        const now = Date.now();
        for (let i = 0; i < 5; i++)
          await records.insertOrGet({
            ...stalled('POST orders.charge', `ORD-${i}`, 'x'),
            leaseUntil: now - 1,
            updatedAt: now,
          });
        const started = performance.now();
        const answer = await running.invoke('work.slow', {}, { 'idempotency-key': 'S-1' });
        expect(answer.status).toBe(200);
        // The passes waited their turn: the handler was not held up past its own 600 ms.
        // Generous for a loaded CI: a handler shut out by the writes would run into its 30 s timeout.
        expect(performance.now() - started).toBeLessThan(8_000);
        expect(await running.rows('SELECT id FROM marks ORDER BY id')).toEqual([{ id: 'after' }, { id: 'before' }]);
        for (let i = 0; i < 5; i++) {
          const id = { tenant: 'default', action: 'POST orders.charge', key: `ORD-${i}` };
          const record = await until(
            `the reconciler to release ${id.key}`,
            () => records.get(id),
            (found) => found?.state === 'released',
          );
          expect(record).toMatchObject({ state: 'released', settlement: { by: 'reconciler' } });
        }
      } finally {
        await records.close();
        await running.stop();
      }
    });
  });

describe('reconcile exports of an app folder', () => {
  const folder = (files: Record<string, string>) => {
    const dir = mkdtempSync(join(tmpdir(), 'oncely-reconcile-app-'));
    for (const [file, text] of Object.entries({ 'package.json': '{ "type": "module" }\n', ...files })) {
      mkdirSync(join(dir, file, '..'), { recursive: true });
      writeFileSync(join(dir, file), text);
    }
    return dir;
  };

  it('loads a handler’s and a consumer’s reconcile; refuses one that is not a function', async () => {
    const app = await loadApp(
      folder({
        'handlers/orders/charge.mjs': "export const handle = () => 1; export const reconcile = () => 'retry';\n",
        'consumers/shop/paid.mjs': "export const handle = () => {}; export const reconcile = () => 'unknown';\n",
      }),
    );
    expect(await app.handlers.get('orders.charge')?.reconcile?.({} as never)).toBe('retry');
    expect(await app.consumers.get('shop/paid')?.reconcile?.({} as never)).toBe('unknown');
    const bad = folder({
      'handlers/orders/charge.mjs': "export const handle = () => 1; export const reconcile = 'no';\n",
    });
    await expect(loadApp(bad)).rejects.toMatchObject({ code: 'CONFIG_INVALID' });
  });
});
