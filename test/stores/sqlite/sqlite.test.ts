import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { createOncely } from '../../../src/index.js';
import { sqliteStore } from '../../../src/sqlite/index.js';
import { describeConformance } from '../conformance.js';
import { describeListing } from '../listing.js';

const dir = mkdtempSync(join(tmpdir(), 'oncely-sqlite-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describeConformance('sqlite file', () => sqliteStore({ path: join(dir, 'conformance.db') }));
describeConformance('sqlite memory', () => sqliteStore({ path: ':memory:' }));
describeListing('sqlite file', () => sqliteStore({ path: join(dir, 'listing.db') }), { idOrder: true });

describe('sqlite specifics', () => {
  it('opens the file in WAL mode with durable commits, on first use', async () => {
    const path = join(dir, 'pragmas.db');
    const store = sqliteStore({ path });
    // Opened on the first call, where better-sqlite3 is loaded (an optional peer), not when built.
    expect(existsSync(path)).toBe(false);
    await store.migrate();
    const db = new Database(path);
    expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
    db.close();
    await store.close();
  });

  it("joins a caller's transaction: the record commits or rolls back with the business writes", async () => {
    const path = join(dir, 'tx.db');
    const once = await createOncely({ store: sqliteStore({ path }) });
    const db = new Database(path);
    db.exec('CREATE TABLE ledger (order_id TEXT PRIMARY KEY, amount INTEGER)');
    const pay = async (orderId: string, fail: boolean) => {
      db.exec('BEGIN IMMEDIATE');
      try {
        const r = await once.run({ action: 'ledger', key: orderId, tx: db }, async () => {
          db.prepare('INSERT INTO ledger VALUES (?, ?)').run(orderId, 100);
          return 'written';
        });
        if (fail) throw new Error('later step failed');
        db.exec('COMMIT');
        return r;
      } catch (error) {
        db.exec('ROLLBACK');
        throw error;
      }
    };
    await expect(pay('O-1', true)).rejects.toThrow('later step failed');
    expect(await once.get('ledger', 'O-1')).toBeNull();
    expect(db.prepare('SELECT COUNT(*) AS n FROM ledger').get()).toEqual({ n: 0 });
    expect((await pay('O-1', false)).replayed).toBe(false);
    expect((await once.get('ledger', 'O-1'))?.state).toBe('succeeded');
    expect((await pay('O-1', false)).replayed).toBe(true);
    expect(db.prepare('SELECT COUNT(*) AS n FROM ledger').get()).toEqual({ n: 1 });
    await expect(once.run({ action: 'ledger', key: 'O-2', tx: db }, async () => 1)).rejects.toMatchObject({
      code: 'INVALID_ARGUMENT',
    });
    db.close();
    await once.close();
  });

  it('defect 11.9: a store blip at completion does not re-run the effect: the completion is retried and lands', async () => {
    const path = join(dir, 'blip.db');
    const once = await createOncely({ store: sqliteStore({ path, busyTimeout: 20 }), defaults: { lease: '5s' } });
    const blocker = new Database(path);
    let runs = 0;
    const charge = () =>
      once.run({ action: 'charge', key: 'O-1' }, async () => {
        runs++;
        // Another connection holds the write lock for half a second, right after the effect.
        blocker.exec('BEGIN EXCLUSIVE');
        setTimeout(() => blocker.exec('ROLLBACK'), 500);
        return { charged: runs };
      });
    const first = await charge();
    expect(first).toMatchObject({ replayed: false, value: { charged: 1 } });
    const again = await charge();
    expect(again).toMatchObject({ replayed: true, value: { charged: 1 } });
    // The retried completion's record is the stored one, times included.
    expect(again.record).toEqual(first.record);
    expect(runs).toBe(1);
    blocker.close();
    await once.close();
  });

  it('defect 11.9: a longer outage at completion is OUTCOME_NOT_STORED carrying the value, never "nothing ran"', async () => {
    const path = join(dir, 'outage.db');
    const once = await createOncely({
      store: sqliteStore({ path, busyTimeout: 20 }),
      defaults: { lease: '5s', completionRetry: 200 },
    });
    const blocker = new Database(path);
    const error = await once
      .run({ action: 'charge', key: 'O-2' }, async () => {
        blocker.exec('BEGIN EXCLUSIVE');
        return { charged: true };
      })
      .catch((e: unknown) => e);
    blocker.exec('ROLLBACK');
    expect(error).toMatchObject({ code: 'OUTCOME_NOT_STORED', value: { charged: true } });
    expect((await once.get('charge', 'O-2'))?.state).toBe('in_progress');
    blocker.close();
    await once.close();
  });

  it('reports a store that cannot write as STORE_UNAVAILABLE and never runs the function', async () => {
    const path = join(dir, 'locked.db');
    const once = await createOncely({ store: sqliteStore({ path, busyTimeout: 50 }) });
    const blocker = new Database(path);
    blocker.exec('BEGIN EXCLUSIVE');
    let runs = 0;
    await expect(once.run({ action: 'a', key: 'k' }, async () => runs++)).rejects.toMatchObject({
      code: 'STORE_UNAVAILABLE',
    });
    expect(runs).toBe(0);
    blocker.exec('ROLLBACK');
    blocker.close();
    await once.close();
    await expect(once.run({ action: 'a', key: 'k' }, async () => runs++)).rejects.toMatchObject({ code: 'CLOSED' });
  });
});
