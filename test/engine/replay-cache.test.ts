import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { createOncely, type OncelyError } from '../../src/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';
import type { RecordStore } from '../../src/store.js';
import { type ManualClock, manualClock } from '../../src/testing/manual-clock.js';

const dir = mkdtempSync(join(tmpdir(), 'oncely-cache-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let files = 0;

/** A real SQLite store that counts the calls reaching it. */
function counted(path = join(dir, `cache-${++files}.db`), clock?: ManualClock) {
  const store = sqliteStore({ path, clock });
  const calls = { insertOrGet: 0, update: 0, get: 0 };
  const wrapped: RecordStore = {
    kind: store.kind,
    insertOrGet(...args) {
      calls.insertOrGet++;
      return store.insertOrGet(...args);
    },
    update(...args) {
      calls.update++;
      return store.update(...args);
    },
    get(...args) {
      calls.get++;
      return store.get(...args);
    },
    list: (...args) => store.list(...args),
    purgeExpired: (...args) => store.purgeExpired(...args),
    close: () => store.close(),
  };
  return { store: wrapped, calls, path };
}

const rejection = (p: Promise<unknown>) =>
  p.then(
    () => Promise.reject(new Error('resolved')),
    (e: OncelyError) => e,
  );

describe('replay cache', () => {
  it('answers duplicates of a finished key from memory, with copies of the record', async () => {
    const { store, calls } = counted();
    const once = await createOncely({ store, replayCache: 10 });
    let runs = 0;
    const charge = () => once.run({ action: 'charge', key: 'O-1', input: { amount: 5 } }, () => ({ id: ++runs }));
    const first = await charge();
    expect(calls).toEqual({ insertOrGet: 1, update: 1, get: 0 });
    const again = await charge();
    expect(again).toMatchObject({ value: { id: 1 }, replayed: true, record: { state: 'succeeded', key: 'O-1' } });
    expect(again.record).toEqual(first.record);
    expect(calls).toEqual({ insertOrGet: 1, update: 1, get: 0 });
    // A caller changing what it got does not change what the next caller gets.
    again.record.state = 'failed';
    (again.value as { id: number }).id = 99;
    expect(await charge()).toMatchObject({ value: { id: 1 }, record: { state: 'succeeded' } });
    expect(runs).toBe(1);
    const reused = await rejection(once.run({ action: 'charge', key: 'O-1', input: { amount: 6 } }, () => 0));
    expect(reused.code).toBe('KEY_REUSED');
    expect(calls.insertOrGet).toBe(1);
    await once.close();
  });

  it('fills from a replay read in the store, and replays stored failures as errors', async () => {
    const { store, calls, path } = counted();
    const writer = await createOncely({ store: sqliteStore({ path }) });
    await writer.run({ action: 'send', key: 'S-1' }, () => 'sent');
    await rejection(
      writer.run({ action: 'send', key: 'S-2', onError: 'store' }, () => {
        throw Object.assign(new Error('card declined'), { code: 'DECLINED' });
      }),
    );
    const once = await createOncely({ store, replayCache: 10 });
    for (let i = 0; i < 3; i++) {
      expect(await once.run({ action: 'send', key: 'S-1' }, () => 'again')).toMatchObject({
        value: 'sent',
        replayed: true,
      });
      const declined = await rejection(once.run({ action: 'send', key: 'S-2' }, () => 'again'));
      expect(declined).toMatchObject({ code: 'DECLINED', message: 'card declined', replayed: true });
    }
    expect(calls.insertOrGet).toBe(2);
    await writer.close();
    await once.close();
  });

  it('forgets a record once it expires, so the key is new again', async () => {
    const clock = manualClock();
    const { store, calls } = counted(undefined, clock);
    const once = await createOncely({ store, replayCache: 10, clock });
    let runs = 0;
    const send = () => once.run({ action: 'send', key: 'T-1', ttl: 80 }, () => ++runs);
    await send();
    expect((await send()).replayed).toBe(true);
    clock.advance(120);
    expect(await send()).toMatchObject({ value: 2, replayed: false });
    expect(calls.insertOrGet).toBe(2);
    await once.close();
  });

  it('keeps at most its size, dropping the least recently used', async () => {
    const { store, calls } = counted();
    const once = await createOncely({ store, replayCache: 2 });
    const send = (key: string) => once.run({ action: 'send', key }, () => key);
    for (const key of ['a', 'b', 'c']) await send(key);
    expect(calls.insertOrGet).toBe(3);
    await send('b');
    await send('c');
    expect(calls.insertOrGet).toBe(3);
    expect((await send('a')).replayed).toBe(true);
    expect(calls.insertOrGet).toBe(4);
    await once.close();
  });

  it("keeps tenants apart, and never caches inside a caller's transaction", async () => {
    const { store, calls, path } = counted();
    const once = await createOncely({ store, replayCache: 10 });
    await once.run({ action: 'send', key: 'K', tenant: 'acme' }, () => 'acme');
    expect(await once.run({ action: 'send', key: 'K', tenant: 'globex' }, () => 'globex')).toMatchObject({
      value: 'globex',
      replayed: false,
    });

    const db = new Database(path);
    db.exec('BEGIN IMMEDIATE');
    await once.run({ action: 'ledger', key: 'L-1', tx: db }, () => 'rolled back');
    db.exec('ROLLBACK');
    db.close();
    const before = calls.insertOrGet;
    expect(await once.run({ action: 'ledger', key: 'L-1' }, () => 'written')).toMatchObject({
      value: 'written',
      replayed: false,
    });
    expect(calls.insertOrGet).toBe(before + 1);
    await once.close();
  });

  it('refuses a size that is not a whole number', async () => {
    for (const replayCache of [-1, 1.5, Number.NaN])
      await expect(createOncely({ store: counted().store, replayCache })).rejects.toMatchObject({
        code: 'INVALID_ARGUMENT',
      });
  });
});
