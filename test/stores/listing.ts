import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RecordState, recordRef, type StoredRecord } from '../../src/core/record.js';
import { createOncely, fingerprint, type Oncely, OncelyError, type RecordStore } from '../../src/index.js';
import type { RecordQuery } from '../../src/store.js';

// sleep: the helper for the one wait whose duration is the point, a TTL running out.
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const COUNT = 10_000;
const MINUTE = 60_000;
// Names with a '/', a space, mixed case and non-ASCII letters: ordering and cursors must not care.
const TENANTS = ['acme', 'Beta co', 'zeta/eu'];
const ACTIONS = ['charge', 'refund', 'email', 'ship'];
// One record in ten unknown, two in progress: enough of each state for pages of 100 to matter.
const STATES: RecordState[] = [
  'unknown',
  'in_progress',
  'in_progress',
  'succeeded',
  'succeeded',
  'succeeded',
  'succeeded',
  'failed',
  'released',
  'succeeded',
];
const KEY_SHAPES = [(i: number) => `ORD-${i}:pay`, (i: number) => `k/${i}`, (i: number) => `ключ ${i}`];

const b64 = (text: string) => Buffer.from(text).toString('base64url');

/** The seeded records: state, tenant, action and age each cycle at their own period. */
function seed(now: number): StoredRecord[] {
  return Array.from({ length: COUNT }, (_, i) => {
    const state = STATES[i % STATES.length] as RecordState;
    // Ages of 0 to 110 minutes in steps of 10: an `olderThan` between steps holds however long the suite runs.
    const updatedAt = now - (i % 12) * 10 * MINUTE;
    const settled = i % 97 === 0;
    const record: StoredRecord = {
      tenant: TENANTS[i % TENANTS.length] as string,
      action: ACTIONS[i % ACTIONS.length] as string,
      key: (KEY_SHAPES[i % KEY_SHAPES.length] as (i: number) => string)(i),
      state,
      fingerprint: `fp-${i}`,
      fence: 1 + (i % 3),
      attempts: 1 + (i % 5),
      leaseUntil: state === 'in_progress' ? now + (i % 2 === 0 ? -MINUTE : 10 * MINUTE) : null,
      result: state === 'succeeded' ? JSON.stringify({ v: { n: i } }) : null,
      traceId: randomUUID(),
      createdAt: updatedAt - MINUTE,
      updatedAt,
      completedAt: state === 'succeeded' || state === 'failed' ? updatedAt : null,
      expiresAt: state === 'unknown' ? null : now + 24 * 60 * MINUTE,
    };
    if (settled) record.settlement = { by: `op-${i}`, at: updatedAt, answer: 'value', note: `ticket ${i}` };
    return record;
  });
}

/** Whether `record` is one `query` asks for (its filters, not its paging). */
function matches(record: StoredRecord, query: Omit<RecordQuery, 'limit' | 'cursor'>): boolean {
  return (
    (query.state === undefined || record.state === query.state) &&
    (query.tenant === undefined || record.tenant === query.tenant) &&
    (query.action === undefined || record.action === query.action) &&
    (query.updatedBefore === undefined || record.updatedAt <= query.updatedBefore)
  );
}

async function rejection(promise: Promise<unknown>): Promise<OncelyError> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(OncelyError);
    return error as OncelyError;
  }
  throw new Error('expected a rejection');
}

/** What a store promises beyond the interface. */
export interface ListingTraits {
  /**
   * Every listing pages in one total order of ids, whatever the filters (the SQL stores: their
   * primary key), so pages come in that order and a cursor of another listing resumes right after its id.
   */
  idOrder?: boolean;
  /** Every page but the last holds `limit` records (Redis: however many other keys the keyspace holds). */
  fullPages?: boolean;
}

/**
 * Listing records, run against one store: 10,000 records paged with every filter, cursors, limits,
 * and the settlement a resolve keeps on a record. `makeStore` must give an empty store.
 */
export function describeListing(
  name: string,
  makeStore: () => RecordStore | Promise<RecordStore>,
  traits: ListingTraits = {},
): void {
  describe(`listing: ${name}`, () => {
    let store: RecordStore;
    let once: Oncely;
    let records: StoredRecord[];
    let seededAt: number;
    const byRef = new Map<string, StoredRecord>();
    // With idOrder: each record's place in the store's order, as an unfiltered listing gives it.
    const place = new Map<string, number>();

    beforeAll(async () => {
      store = await makeStore();
      once = await createOncely({ store, tenant: 'acme', defaults: { ttl: '1h', lease: '5s' } });
      seededAt = Date.now();
      records = seed(seededAt);
      for (const record of records) byRef.set(recordRef(record), record);
      // In parallel batches: the stores coalesce concurrent inserts (group commit, multi-row statements).
      for (let i = 0; i < records.length; i += 1_000) {
        const answers = await Promise.all(records.slice(i, i + 1_000).map((r) => store.insertOrGet(r)));
        expect(answers.every((a) => a.inserted)).toBe(true);
      }
      if (traits.idOrder)
        for (const record of await listAll({ limit: 1_000 })) place.set(recordRef(record), place.size);
    }, 60_000);

    // Closing the engine closes its store.
    afterAll(() => once?.close());

    /** Every page of `query` by store.list: each record seen once, each page within the limit. */
    async function listAll(query: Omit<RecordQuery, 'cursor'>): Promise<StoredRecord[]> {
      const seen: StoredRecord[] = [];
      const refs = new Set<string>();
      let cursor: string | undefined;
      // A page may come back short (a store may filter after it reads), never past the limit; a loop bound all the same.
      for (let pages = 0; pages < (COUNT / query.limit) * 4 + 10; pages++) {
        const page = await store.list(cursor === undefined ? query : { ...query, cursor });
        expect(page.records.length).toBeLessThanOrEqual(query.limit);
        for (const record of page.records) {
          const ref = recordRef(record);
          expect(refs.has(ref), `${ref} listed twice`).toBe(false);
          refs.add(ref);
          seen.push(record);
        }
        if (page.cursor === null) return seen;
        expect(typeof page.cursor).toBe('string');
        if (traits.fullPages) expect(page.records.length, 'a page before the last').toBe(query.limit);
        cursor = page.cursor;
      }
      throw new Error('listing did not end');
    }

    /** Lists `query` page by page and checks it found exactly the seeded records that match, as stored. */
    async function expectListing(query: Omit<RecordQuery, 'cursor'>): Promise<number> {
      const listed = await listAll(query);
      const expected = records.filter((r) => matches(r, query));
      expect(listed.length).toBe(expected.length);
      expect(new Set(listed.map(recordRef))).toEqual(new Set(expected.map(recordRef)));
      for (const record of listed) expect(record).toEqual(byRef.get(recordRef(record)));
      if (traits.idOrder) {
        const places = listed.map((record) => place.get(recordRef(record)) as number);
        expect(places.every((at, i) => i === 0 || at > (places[i - 1] as number))).toBe(true);
      }
      return listed.length;
    }

    it('lists all 10,000 records by pages of 1,000 and of 100, each once, field for field', async () => {
      expect(await expectListing({ limit: 1_000 })).toBe(COUNT);
      expect(await expectListing({ limit: 100 })).toBe(COUNT);
    }, 60_000);

    it('filters by state, unknown and in_progress included, at uneven page sizes', async () => {
      expect(await expectListing({ state: 'unknown', limit: 100 })).toBe(COUNT / 10);
      expect(await expectListing({ state: 'in_progress', limit: 333 })).toBe(COUNT / 5);
      expect(await expectListing({ state: 'failed', limit: 1_000 })).toBe(COUNT / 10);
      expect(await expectListing({ state: 'released', limit: 250 })).toBe(COUNT / 10);
      expect(await expectListing({ state: 'succeeded', limit: 1_000 })).toBe(COUNT / 2);
    }, 60_000);

    it('filters by tenant, action and age, alone and together', async () => {
      const cutoff = seededAt - 55 * MINUTE;
      expect(await expectListing({ tenant: 'zeta/eu', limit: 500 })).toBeGreaterThan(3_000);
      expect(await expectListing({ action: 'refund', limit: 400 })).toBe(COUNT / 4);
      expect(await expectListing({ updatedBefore: cutoff, limit: 1_000 })).toBeGreaterThan(4_900);
      expect(await expectListing({ state: 'unknown', tenant: 'Beta co', limit: 100 })).toBeGreaterThan(300);
      expect(await expectListing({ state: 'in_progress', action: 'charge', limit: 100 })).toBeGreaterThan(0);
      expect(await expectListing({ tenant: 'acme', action: 'email', limit: 200 })).toBeGreaterThan(0);
      expect(await expectListing({ state: 'unknown', updatedBefore: cutoff, limit: 100 })).toBeGreaterThan(0);
      expect(
        await expectListing({
          state: 'in_progress',
          tenant: 'acme',
          action: 'ship',
          updatedBefore: seededAt - 25 * MINUTE,
          limit: 100,
        }),
      ).toBeGreaterThan(0);
      // Filters no record meets: one empty page, no cursor.
      expect(await store.list({ tenant: 'nobody', limit: 100 })).toEqual({ records: [], cursor: null });
      expect(await store.list({ state: 'unknown', updatedBefore: seededAt - 1_000 * MINUTE, limit: 10 })).toEqual({
        records: [],
        cursor: null,
      });
    }, 60_000);

    it('keeps a cursor safe under another filter set: only matching records, none twice', async () => {
      // The cursors of every page of one listing: ids spread across tenants, before, in and after the other's.
      const cursors: { from: string; last: StoredRecord }[] = [];
      for (let page = await store.list({ state: 'unknown', limit: 100 }); page.cursor; ) {
        cursors.push({ from: page.cursor, last: page.records[page.records.length - 1] as StoredRecord });
        page = await store.list({ state: 'unknown', limit: 100, cursor: page.cursor });
      }
      expect(cursors.length).toBeGreaterThan(2);
      const other = { tenant: 'acme', action: 'charge' } as const;
      const inOrder = [...place.keys()];
      for (const { from, last } of cursors) {
        const seen: string[] = [];
        let cursor: string | null = from;
        for (let pages = 0; cursor !== null && pages < 100; pages++) {
          let page: Awaited<ReturnType<RecordStore['list']>>;
          try {
            page = await store.list({ ...other, limit: 100, cursor });
          } catch (error) {
            // Refusing a cursor of another listing is safe too, if it says so with the catalogue's code.
            expect((error as OncelyError).code).toBe('CURSOR_INVALID');
            break;
          }
          for (const record of page.records) {
            expect(matches(record, other)).toBe(true);
            expect(seen).not.toContain(recordRef(record));
            seen.push(recordRef(record));
          }
          cursor = page.cursor;
        }
        if (!traits.idOrder) continue;
        expect(cursor).toBeNull();
        // Resumed right after the cursor's id: the other listing's records that follow it, in order.
        const after = place.get(recordRef(last)) as number;
        const expected = inOrder.filter((ref, at) => at > after && matches(byRef.get(ref) as StoredRecord, other));
        expect(seen).toEqual(expected);
      }
    }, 60_000);

    it('refuses a cursor it did not give with CURSOR_INVALID', async () => {
      const bad = [
        '%%% not base64 %%%',
        b64('not json'),
        b64('null'),
        b64('[]'),
        b64('{"tenant":1}'),
        b64('[1,2,3]'),
        'x'.repeat(5_000),
      ];
      for (const cursor of bad) {
        expect((await rejection(store.list({ limit: 10, cursor }))).code, cursor).toBe('CURSOR_INVALID');
        expect((await rejection(store.list({ state: 'unknown', limit: 10, cursor }))).code, cursor).toBe(
          'CURSOR_INVALID',
        );
        expect((await rejection(once.list({ state: 'unknown', cursor }))).code, cursor).toBe('CURSOR_INVALID');
      }
      expect((await rejection(once.list({ cursor: '' }))).code).toBe('CURSOR_INVALID');
    });

    it('once.list pages across tenants with the same filters, limits 1 to 1,000, records without results', async () => {
      for (const limit of [0, 1_001, 1.5, -1])
        expect((await rejection(once.list({ limit }))).code).toBe('INVALID_ARGUMENT');
      expect((await rejection(once.list({ state: 'lost' as RecordState }))).code).toBe('INVALID_ARGUMENT');
      const one = await once.list({ state: 'unknown', limit: 1 });
      expect(one.records).toHaveLength(1);
      expect(one.cursor).not.toBeNull();
      expect(one.records[0]).not.toHaveProperty('result');

      const want = records.filter((r) => r.state === 'in_progress' && r.updatedAt <= seededAt - 55 * MINUTE);
      const seen = new Set<string>();
      let cursor: string | undefined;
      for (let pages = 0; pages < 100; pages++) {
        const page = await once.list({
          state: 'in_progress',
          olderThan: '55m',
          limit: 1_000,
          ...(cursor ? { cursor } : {}),
        });
        for (const record of page.records) {
          expect(seen.has(recordRef(record))).toBe(false);
          seen.add(recordRef(record));
          const { result: _, ...stored } = byRef.get(recordRef(record)) as StoredRecord;
          expect(record).toEqual(stored);
        }
        if (!page.cursor) break;
        cursor = page.cursor;
      }
      expect(seen).toEqual(new Set(want.map(recordRef)));

      const beta = await once.list({ tenant: 'Beta co', action: 'ship', state: 'failed', limit: 1_000 });
      expect(beta.cursor).toBeNull();
      expect(beta.records.map(recordRef).sort()).toEqual(
        records
          .filter((r) => r.tenant === 'Beta co' && r.action === 'ship' && r.state === 'failed')
          .map(recordRef)
          .sort(),
      );
      // once.get by full id reads another tenant's record; by action and key, its own.
      const other = records.find((r) => r.tenant === 'zeta/eu' && r.settlement) as StoredRecord;
      expect(await once.get({ tenant: other.tenant, action: other.action, key: other.key })).toMatchObject({
        state: other.state,
        settlement: other.settlement,
      });
      expect(await once.get(other.action, other.key)).toBeNull();
    }, 60_000);

    it('keeps who settled a record, shows it by get and list, and clears it when an expired key starts again', async () => {
      const act = `settle-${randomUUID().slice(0, 8)}`;
      const now = Date.now();
      const unknown = (key: string, input: unknown): StoredRecord => ({
        tenant: 'acme',
        action: act,
        key,
        state: 'unknown',
        fingerprint: fingerprint(input),
        fence: 1,
        attempts: 1,
        leaseUntil: null,
        result: null,
        traceId: randomUUID(),
        createdAt: now - 1_000,
        updatedAt: now - 1_000,
        completedAt: null,
        expiresAt: null,
      });
      for (const key of ['paid', 'declined', 'again'])
        expect((await store.insertOrGet(unknown(key, { key }))).inserted).toBe(true);

      // Side by side, so a store that batches concurrent writes (PostgreSQL) writes settlements in one statement.
      // A TTL of an hour: the listings below may take seconds on a loaded machine, and 'paid' must still replay after them.
      const [paid] = await Promise.all([
        once.resolve(act, 'paid', { value: { charge: 'ch_1' } }, { by: 'alice', note: 'PSP ref 77 "quoted" {x}' }),
        once.resolve(act, 'declined', { error: { message: 'card declined', code: 'DECLINED' } }, { by: 'bob' }),
        once.resolve(act, 'again', 'retry'),
      ]);
      const expected = { by: 'alice', at: expect.any(Number), answer: 'value', note: 'PSP ref 77 "quoted" {x}' };
      expect(paid).toMatchObject({ state: 'succeeded', settlement: expected });
      expect(paid.settlement?.at).toBeGreaterThanOrEqual(now);

      expect(await once.get(act, 'paid')).toMatchObject({ settlement: expected });
      expect((await store.get({ tenant: 'acme', action: act, key: 'paid' }))?.settlement).toEqual(paid.settlement);
      const listed = await once.list({ action: act, limit: 10 });
      const settlements = Object.fromEntries(listed.records.map((r) => [r.key, r.settlement]));
      expect(settlements).toEqual({
        paid: paid.settlement,
        declined: { by: 'bob', at: expect.any(Number), answer: 'error' },
        again: { by: 'person', at: expect.any(Number), answer: 'retry' },
      });
      expect(
        (await store.list({ action: act, state: 'failed', limit: 10 })).records.map((r) => r.settlement?.by),
      ).toEqual(['bob']);
      // The stored value replays, settled.
      expect(await once.run({ action: act, key: 'paid', input: { key: 'paid' } }, () => 'ran')).toMatchObject({
        replayed: true,
        value: { charge: 'ch_1' },
      });

      // An expired key is a new intent: its new life carries no settlement of the old one. Its own
      // key, resolved only now with a short TTL, and run again once its expiry has surely passed
      // (waited from the expiresAt it was given, however long the writes took).
      expect((await store.insertOrGet(unknown('lapsed', { key: 'lapsed' }))).inserted).toBe(true);
      const lapsed = await once.resolve(act, 'lapsed', { value: 'old' }, { by: 'carol', note: 'n', ttl: '200ms' });
      expect(lapsed).toMatchObject({ state: 'succeeded', settlement: { by: 'carol', answer: 'value', note: 'n' } });
      expect(lapsed.expiresAt).toBeGreaterThan(now);
      // sleep: the 200 ms TTL must run out.
      await sleep(Math.max(0, (lapsed.expiresAt as number) - Date.now()) + 200);
      const fresh = await once.run({ action: act, key: 'lapsed', input: { key: 'lapsed' } }, () => 'ran');
      expect(fresh).toMatchObject({ replayed: false, value: 'ran' });
      expect(fresh.record).not.toHaveProperty('settlement');
      expect(await once.get(act, 'lapsed')).not.toHaveProperty('settlement');
      expect((await store.get({ tenant: 'acme', action: act, key: 'lapsed' }))?.settlement).toBeUndefined();
      const after = await store.list({ action: act, state: 'succeeded', limit: 10 });
      const byKey = after.records
        .map((r) => [r.key, r.settlement])
        .sort(([a], [b]) => String(a).localeCompare(String(b)));
      expect(byKey).toEqual([
        ['lapsed', undefined],
        ['paid', paid.settlement],
      ]);
    }, 30_000);
  });
}
