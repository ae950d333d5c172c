/**
 * On SQLite the host's record store shares the Db's one connection. A purge of expired records
 * must wait its turn in the Db's queue: run beside a handler's open transaction, its DELETE would
 * join that transaction and be rolled back with it, while the purge reported the rows gone.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { sqliteStore } from '../../src/sqlite/index.js';
import { sleep, startHost } from '../support/host-app.js';
import { until } from '../support/wait.js';

describe('retention beside an open handler transaction on SQLite', () => {
  it("purges expired records while a handler holds its transaction open: the handler's rollback takes none of the purge with it", async () => {
    // SQLite itself, whatever ONCELY_STORES says: this is about its one connection.
    const target = join(mkdtempSync(join(tmpdir(), 'oncely-retention-share-')), 'app.db');
    let holding = false;
    const running = await startHost(target, {
      schemaSql: 'CREATE TABLE IF NOT EXISTS marks (id TEXT PRIMARY KEY, note TEXT NOT NULL)',
      handlers: {
        'work.slow': {
          async handle(_input, ctx) {
            await ctx.store.createIfAbsent('marks', { id: 'before', note: 'x' }, ['id']);
            holding = true;
            // sleep: the transaction stays open while the purge runs beside it.
            await sleep(600);
            await ctx.store.createIfAbsent('marks', { id: 'after', note: 'x' }, ['id']);
            // Fails after all: its transaction rolls back, which must take nothing of the purge with it.
            throw new Error('the handler fails');
          },
        },
      },
    });
    // Expired records, planted through a connection of the test's own.
    const records = sqliteStore({ path: target });
    try {
      const at = Date.now() - 600_000;
      for (let i = 0; i < 20; i++)
        await records.insertOrGet({
          tenant: 'default',
          action: 'old',
          key: `K-${i}`,
          state: 'succeeded',
          fingerprint: 'f',
          fence: 1,
          attempts: 1,
          leaseUntil: null,
          result: '{"value":1}',
          traceId: `t-${i}`,
          createdAt: at,
          updatedAt: at,
          completedAt: at,
          expiresAt: at + 1_000,
        });
      const handler = running.invoke('work.slow', {}, { 'idempotency-key': 'S-1' });
      await until('the handler holding its transaction open', () => holding);
      const report = await running.host.purge();
      expect(report.tables.find((t) => t.table === 'oncely_records')?.rows).toBe(20);
      expect((await handler).status).toBe(500);
      expect(await running.rows('SELECT id FROM marks ORDER BY id')).toEqual([]);
      expect(await running.rows("SELECT key FROM oncely_records WHERE action = 'old'")).toEqual([]);
    } finally {
      await records.close();
      await running.stop();
    }
  });
});
