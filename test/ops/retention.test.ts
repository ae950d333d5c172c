import { afterEach, describe, expect, it } from 'vitest';
import { OncelyError } from '../../src/core/errors.js';
import { openDb } from '../../src/db/index.js';
import { createHost } from '../../src/host/host.js';
import { recordStoreFor } from '../../src/host/records.js';
import { purge, retentionSettings } from '../../src/ops/retention.js';
import { startHost } from '../support/host-app.js';
import { until } from '../support/wait.js';
import { DATABASES, DAY, emptyApp, ids, migratedHost, plant, TABLES } from './retention-fixture.js';

const sortedIds = (list: string[]) => [...list].sort();

describe('retention settings', () => {
  it('fills the documented defaults and keeps dead letters forever', () => {
    const s = retentionSettings(undefined);
    expect(s).toMatchObject({ scheduled: true, everyMs: 3_600_000, batch: 1000, maxBatches: 1000 });
    expect(s.keep).toEqual({
      events: 30 * DAY,
      outbox: 7 * DAY,
      flows: 30 * DAY,
      approvals: 30 * DAY,
      reservations: 30 * DAY,
      deadLetters: null,
      duplicateFindings: 90 * DAY,
      adminActions: 365 * DAY,
    });
    expect(retentionSettings(false).scheduled).toBe(false);
    expect(retentionSettings({ events: 'permanent', deadLetters: '14d' }).keep).toMatchObject({
      events: null,
      deadLetters: 14 * DAY,
    });
  });

  it.each([
    [{ events: 'soon' }, 'retention.events'],
    [{ deadLetters: 'forever' }, 'retention.deadLetters'],
    [{ batch: 0 }, 'retention.batch'],
    [{ maxBatches: 2.5 }, 'retention.maxBatches'],
    [{ every: '0s' }, 'retention.every'],
    [{ events: 0 }, 'retention.events'],
  ])('refuses %j with CONFIG_INVALID naming it', (config, named) => {
    const refused = (() => {
      try {
        retentionSettings(config as never);
      } catch (error) {
        return error;
      }
    })();
    expect(refused).toBeInstanceOf(OncelyError);
    expect(refused).toMatchObject({ code: 'CONFIG_INVALID' });
    expect((refused as Error).message).toContain(named);
  });
});

for (const database of DATABASES) {
  describe(`retention on ${database.name}`, () => {
    const cleanups: (() => Promise<void>)[] = [];
    afterEach(async () => {
      for (const c of cleanups.splice(0).reverse()) await c();
    });
    const fresh = async (config = {}) => {
      const { target, cleanup } = database.fresh();
      cleanups.push(cleanup);
      const opened = await migratedHost(target, config);
      cleanups.push(() => opened.host.stop());
      return { ...opened, target };
    };

    it('a bad retention fails the host at start with CONFIG_INVALID', async () => {
      const { target, cleanup } = database.fresh();
      cleanups.push(cleanup);
      const db = await openDb(target);
      cleanups.push(() => db.close());
      await expect(
        createHost(emptyApp({ retention: { outbox: '7 days' as never } }), db, recordStoreFor(db)),
      ).rejects.toMatchObject({ code: 'CONFIG_INVALID' });
    });

    it('removes exactly the old finished rows of every table, never a live, unknown, pending, processing, waiting or dead one', async () => {
      const { host, db } = await fresh();
      const planted = await plant(host, db);
      const before = Object.fromEntries(await Promise.all(TABLES.map(async (t) => [t, await ids(db, t)] as const)));

      const dry = await host.purge({ dryRun: true });
      for (const table of TABLES) expect(await ids(db, table), `${table} after the dry run`).toEqual(before[table]);

      const report = await host.purge();
      for (const table of TABLES) {
        const expected = planted[table];
        if (!expected) throw new Error(`nothing planted in ${table}`);
        expect(await ids(db, table), `${table} survivors`).toEqual(sortedIds(expected.kept));
      }
      const removed = Object.fromEntries(report.tables.map((t) => [t.table, t.rows]));
      const purgedTables = Object.entries(planted).filter(([, p]) => p.purged.length > 0);
      expect(removed).toEqual(Object.fromEntries(purgedTables.map(([t, p]) => [t, p.purged.length])));
      // The dry run counted what the purge then removed, table by table.
      expect(dry.tables.map((t) => [t.table, t.rows])).toEqual(report.tables.map((t) => [t.table, t.rows]));
      expect(dry.dryRun).toBe(true);
      for (const [table, p] of purgedTables)
        expect(host.metrics.value('oncely_purged_total', [table]), table).toBe(p.purged.length);

      // A second pass finds nothing left.
      const again = await host.purge();
      expect(again.tables.every((t) => t.rows === 0)).toBe(true);
    });

    it('dead letters go only with a deadLetters retention, and only the old ones', async () => {
      const { host, db } = await fresh({ retention: { deadLetters: '1d', events: 'permanent' } });
      const planted = await plant(host, db);
      await host.purge();
      // events 'permanent': no finished event goes; the old dead letter does, the new one stays.
      const events = [...(planted.oncely_events?.kept ?? []), ...(planted.oncely_events?.purged ?? [])];
      expect(await ids(db, 'oncely_events')).toEqual(sortedIds(events.filter((id) => id !== 'dead-old')));
      const outbox = planted.oncely_outbox?.kept ?? [];
      expect(await ids(db, 'oncely_outbox')).toEqual(sortedIds(outbox.filter((id) => id !== 'dead-old')));
    });

    it('a purged event id is accepted again (the events retention is the dedupe window)', async () => {
      const { host, db } = await fresh({ retention: { events: '1d' } });
      expect(await host.events.intake('shop', 'evt-1', 'order.paid', { n: 1 })).toBe('accepted');
      await db.run("UPDATE oncely_events SET status = 'applied', updated_at = ? WHERE event_id = 'evt-1'", [
        Date.now() - 2 * DAY,
      ]);
      expect(await host.events.intake('shop', 'evt-1', 'order.paid', { n: 1 })).toBe('duplicate');
      await host.purge();
      expect(await host.events.intake('shop', 'evt-1', 'order.paid', { n: 1 })).toBe('accepted');
    });

    it('skips the tables of components this database never migrated', async () => {
      const { target, cleanup } = database.fresh();
      cleanups.push(cleanup);
      const db = await openDb(target);
      const host = await createHost(emptyApp(), db, recordStoreFor(db));
      cleanups.push(() => host.stop());
      await host.migrate();
      const report = await host.purge();
      const tables = report.tables.map((t) => t.table);
      expect(tables).toContain('oncely_events');
      for (const absent of ['oncely_flows', 'oncely_flow_steps', 'oncely_approvals', 'oncely_credit_reservations'])
        expect(tables).not.toContain(absent);
    });

    it('oncely serve purges on its schedule, and stops with the host', async () => {
      const { target, cleanup } = database.fresh();
      cleanups.push(cleanup);
      const running = await startHost(target, { config: { retention: { every: '100ms' } } });
      cleanups.push(() => running.stop());
      const old = Date.now() - 60 * DAY;
      const db = await openDb(target, { poolSize: 1 });
      cleanups.push(() => db.close());
      await db.run(
        `INSERT INTO oncely_events (source, event_id, type, payload, status, attempts, next_attempt_at, received_at, updated_at)
         VALUES ('shop', 'old-applied', 't', '{}', 'applied', 1, ?, ?, ?)`,
        [old, old, old],
      );
      // The row goes in the purge's DELETE; its count right after: both awaited.
      const purged = await until(
        'the scheduled purge to remove the old event, and count it',
        async () => ({
          left: (await running.rows("SELECT 1 FROM oncely_events WHERE event_id = 'old-applied'")).length,
          counted: running.host.metrics.value('oncely_purged_total', ['oncely_events']),
        }),
        ({ left, counted }) => left === 0 && counted > 0,
        { timeoutMs: 10_000, intervalMs: 50 },
      );
      expect(purged).toEqual({ left: 0, counted: 1 });
    });

    it('bounds each DELETE at `batch` rows and a pass at `maxBatches`', async () => {
      const { db } = await fresh();
      const old = Date.now() - 60 * DAY;
      for (let i = 0; i < 25; i++)
        await db.run(
          `INSERT INTO oncely_events (source, event_id, type, payload, status, attempts, next_attempt_at, received_at, updated_at)
           VALUES ('shop', ?, 't', '{}', 'applied', 1, ?, ?, ?)`,
          [`e${i}`, old, old, old],
        );
      const batches: number[] = [];
      const settings = retentionSettings({ batch: 4, maxBatches: 3 });
      const first = await purge(db, settings, {
        onBatch: (table, rows) => table === 'oncely_events' && batches.push(rows),
      });
      expect(batches).toEqual([4, 4, 4]);
      expect(first.tables.find((t) => t.table === 'oncely_events')).toEqual({
        table: 'oncely_events',
        rows: 12,
        batches: 3,
      });
      expect((await ids(db, 'oncely_events')).length).toBe(13);
      batches.length = 0;
      await purge(db, retentionSettings({ batch: 4, maxBatches: 100 }), {
        onBatch: (table, rows) => table === 'oncely_events' && batches.push(rows),
      });
      expect(batches).toEqual([4, 4, 4, 1]);
      expect(await ids(db, 'oncely_events')).toEqual([]);

      // A host stopping aborts the pass: it ends after the batch under way.
      for (let i = 0; i < 10; i++)
        await db.run(
          `INSERT INTO oncely_events (source, event_id, type, payload, status, attempts, next_attempt_at, received_at, updated_at)
           VALUES ('shop', ?, 't', '{}', 'stale', 1, ?, ?, ?)`,
          [`s${i}`, old, old, old],
        );
      const stopping = new AbortController();
      const aborted = await purge(db, retentionSettings({ batch: 4 }), {
        signal: stopping.signal,
        onBatch: () => stopping.abort(),
      });
      expect(aborted.tables.find((t) => t.table === 'oncely_events')).toEqual({
        table: 'oncely_events',
        rows: 4,
        batches: 1,
      });
      expect((await ids(db, 'oncely_events')).length).toBe(6);
    });
  });
}
