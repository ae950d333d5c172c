import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Settlement, StoredRecord } from '../../../src/core/record.js';
import { redisStore } from '../../../src/redis/index.js';
import { recordKey } from '../../../src/redis/store.js';
import type { RecordQuery, RecordStore } from '../../../src/store.js';
import { connectRedis, dropPrefix, freshPrefix, REDIS_URL } from '../../support/redis.js';

const prefix = freshPrefix();
let redis: Awaited<ReturnType<typeof connectRedis>>;
let n = 0;

/**
 * Every page of a SCAN listing to its end: a page may come back short before it (one run visits at
 * most SCAN_BUDGET keys), and the shared Redis may hold more keys of others than that.
 */
async function listAll(store: RecordStore, query: Omit<RecordQuery, 'cursor'>): Promise<StoredRecord[]> {
  const records: StoredRecord[] = [];
  let cursor: string | null | undefined;
  do {
    const page = await store.list(cursor ? { ...query, cursor } : query);
    records.push(...page.records);
    cursor = page.cursor;
  } while (cursor !== null);
  return records;
}

function record(overrides: Partial<StoredRecord> = {}): StoredRecord {
  const now = Date.now();
  return {
    tenant: 'acme',
    action: 'charge',
    key: `k-${++n}`,
    state: 'unknown',
    fingerprint: 'fp',
    fence: 3,
    attempts: 2,
    leaseUntil: null,
    result: null,
    traceId: `trace-${n}`,
    createdAt: now - 1_000,
    updatedAt: now - 1_000,
    completedAt: null,
    expiresAt: null,
    ...overrides,
  };
}

// A settler's free text may hold the field separator and JSON's own characters.
const settled: Settlement = { by: 'ops|alice "a"', at: 1_700_000_000_000, answer: 'value', note: 'ref 7|8 \\ {x}' };

beforeAll(async () => {
  redis = await connectRedis();
});

afterAll(async () => {
  await dropPrefix(redis, prefix);
  await redis.close();
});

describe('redis store settlements', () => {
  it('reads a record stored before settlements existed, settles it, and clears it back to the old form', async () => {
    const store = redisStore({ client: redis, prefix });
    const r = record();
    const key = recordKey(prefix, r);
    // The o1 layout, as the store wrote every record before: no settlement field.
    const old = `o1|unknown|3|||2|${r.createdAt}|${r.updatedAt}||fp|${r.traceId}|`;
    await redis.set(key, old);
    expect(await store.get(r)).toEqual(r);
    expect(await store.get(r)).not.toHaveProperty('settlement');

    const now = await store.update(
      r,
      { fence: 3, states: ['unknown'] },
      { state: 'succeeded', result: '{"v":1}', settlement: settled },
    );
    expect(now).not.toBeNull();
    expect(await redis.get(key)).toMatch(/^o2\|succeeded\|/);
    expect((await store.get(r))?.settlement).toEqual(settled);
    const listed = await listAll(store, { tenant: 'acme', action: 'charge', state: 'succeeded', limit: 10 });
    expect(listed.find((x) => x.key === r.key)?.settlement).toEqual(settled);
    // A patch without a settlement keeps it; null removes it, and the record is written as before.
    await store.update(r, { fence: 3, states: ['succeeded'] }, { attempts: 4 });
    expect((await store.get(r))?.settlement).toEqual(settled);
    await store.update(r, { fence: 3, states: ['succeeded'] }, { settlement: null });
    expect(await redis.get(key)).toMatch(/^o1\|succeeded\|3\|\|\|4\|/);
    expect(await store.get(r)).not.toHaveProperty('settlement');
    expect(await store.get(r)).toMatchObject({ state: 'succeeded', result: '{"v":1}', attempts: 4 });
  });

  it('reindex adds records written before the indexes existed, so listing finds them; again it adds none', async () => {
    const p = `${prefix}reindex:`;
    const store = redisStore({ client: redis, prefix: p });
    const old = record();
    // As the store wrote an unknown record before the indexes: the string alone, no member.
    await redis.set(recordKey(p, old), `o1|unknown|3|||2|${old.createdAt}|${old.updatedAt}||fp|${old.traceId}|`);
    const indexed = record({ key: 'new-one' });
    await store.insertOrGet(indexed);
    await store.insertOrGet(record({ state: 'succeeded', result: '1' }));
    expect((await store.list({ state: 'unknown', limit: 10 })).records.map((r) => r.key)).toEqual(['new-one']);
    expect(await store.reindex()).toBe(1);
    expect((await store.list({ state: 'unknown', limit: 10 })).records.map((r) => r.key).sort()).toEqual(
      [old.key, 'new-one'].sort(),
    );
    expect(await store.reindex()).toBe(0);
    await store.close();
  });

  it('inserts a settled record with relative times and with absolute ones, and answers its duplicate with it', async () => {
    const store = redisStore({ client: redis, prefix });
    const given = record({ settlement: settled, result: 'a|b' });
    expect((await store.insertOrGet(given)).inserted).toBe(true);
    expect(await store.get(given)).toEqual(given);
    const relative = record({
      state: 'succeeded',
      createdAt: 0,
      updatedAt: 0,
      completedAt: 0,
      expiresAt: 60_000,
      result: 'x|y',
      settlement: { by: 'reconciler', at: 1, answer: 'retry' },
    });
    const inserted = await store.insertOrGet(relative, undefined, { relative: true });
    expect(inserted.inserted).toBe(true);
    const stored = await store.get(relative);
    expect(stored).toEqual(inserted.record);
    expect(stored?.settlement).toEqual({ by: 'reconciler', at: 1, answer: 'retry' });
    expect(stored?.result).toBe('x|y');
    const again = await store.insertOrGet(record({ key: relative.key }));
    expect(again).toMatchObject({ inserted: false, record: stored });
  });

  it('lists through an ioredis client whose own keyPrefix comes before the store prefix, index and SCAN alike', async () => {
    const io = new Redis(REDIS_URL, { keyPrefix: `${prefix}io:` });
    const store = redisStore({ client: io, prefix: 'p:' });
    try {
      const u = record({ tenant: 'io' });
      const done = record({ tenant: 'io', state: 'failed', result: 'e', completedAt: Date.now(), expiresAt: null });
      await store.insertOrGet(u);
      await store.insertOrGet(done);
      expect(await redis.exists(`${prefix}io:p:r:2:io:6:charge:${u.key}`)).toBe(1);
      expect((await store.list({ state: 'unknown', limit: 10 })).records).toEqual([u]);
      expect((await listAll(store, { tenant: 'io', limit: 10 })).map((r) => r.key).sort()).toEqual(
        [u.key, done.key].sort(),
      );
    } finally {
      io.disconnect();
    }
  });
});
