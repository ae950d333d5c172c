import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RecordState, recordRef, type StoredRecord } from '../../src/core/record.js';
import { createOncely, type Oncely, type RecordStore } from '../../src/index.js';
import type { RecordQuery } from '../../src/store.js';

const STATES: RecordState[] = ['succeeded', 'failed', 'unknown', 'in_progress', 'released'];

/** `count` records of `tenant`, their states, actions and ages cycling. */
function records(tenant: string, count: number, now: number): StoredRecord[] {
  return Array.from({ length: count }, (_, i) => {
    const state = STATES[i % STATES.length] as RecordState;
    const updatedAt = now - (i % 4) * 60_000;
    return {
      tenant,
      action: i % 3 === 0 ? 'refund' : 'charge',
      key: `ORD-${i}`,
      state,
      fingerprint: `fp-${i}`,
      fence: 1,
      attempts: 1,
      leaseUntil: state === 'in_progress' ? now + 600_000 : null,
      result: null,
      traceId: randomUUID(),
      createdAt: updatedAt,
      updatedAt,
      completedAt: state === 'succeeded' || state === 'failed' ? updatedAt : null,
      expiresAt: state === 'unknown' ? null : now + 3_600_000,
    };
  });
}

/**
 * Listing in a keyspace that is mostly another application's (the caller seeds those keys):
 * `makeStore` gives an empty store beside them. Every page but the last holds `limit` records,
 * and the pages together are exactly the matching records, each once: by store.list and once.list,
 * which the CLI, the admin API and the dashboard page through.
 */
export function describeCrowdedListing(name: string, makeStore: () => RecordStore): void {
  describe(`listing among other keys: ${name}`, () => {
    let store: RecordStore;
    let once: Oncely;
    let all: StoredRecord[];
    let now: number;

    beforeAll(async () => {
      store = makeStore();
      once = await createOncely({ store });
      now = Date.now();
      all = [...records('five', 5, now), ...records('many', 1_500, now)];
      const answers = await Promise.all(all.map((r) => store.insertOrGet(r)));
      expect(answers.every((a) => a.inserted)).toBe(true);
    }, 60_000);
    afterAll(() => once?.close());

    /** Every page of `query`: full but the last, each record once; answers the records. */
    async function pages(query: Omit<RecordQuery, 'cursor'>): Promise<{ refs: string[]; sizes: number[] }> {
      const refs: string[] = [];
      const sizes: number[] = [];
      let cursor: string | undefined;
      for (let n = 0; n < 1_000; n++) {
        const page = await store.list(cursor === undefined ? query : { ...query, cursor });
        sizes.push(page.records.length);
        refs.push(...page.records.map(recordRef));
        if (page.cursor === null) return { refs, sizes };
        expect(page.records.length, `page ${n + 1} of ${JSON.stringify(query)}: sizes ${sizes}`).toBe(query.limit);
        cursor = page.cursor;
      }
      throw new Error(`listing ${JSON.stringify(query)} did not end`);
    }

    it('review3.9: answers the 5 records of a tenant in one page of 50, not 1 and a cursor', async () => {
      const page = await store.list({ tenant: 'five', limit: 50 });
      expect(page.cursor).toBeNull();
      expect(page.records.map(recordRef).sort()).toEqual(
        all
          .filter((r) => r.tenant === 'five')
          .map(recordRef)
          .sort(),
      );
      const listed = await once.list({ tenant: 'five', limit: 50 });
      expect([listed.records.length, listed.cursor]).toEqual([5, null]);
      expect(await store.list({ tenant: 'nobody', limit: 100 })).toEqual({ records: [], cursor: null });
    }, 60_000);

    it('review3.9: fills every page but the last, and the pages are exactly the matching records', async () => {
      const queries: Omit<RecordQuery, 'cursor'>[] = [
        { limit: 100 },
        { limit: 1_000 },
        { state: 'succeeded', limit: 7 },
        { state: 'unknown', limit: 40 },
        { state: 'in_progress', tenant: 'many', limit: 33 },
        { tenant: 'many', action: 'refund', limit: 64 },
        { action: 'charge', updatedBefore: now - 90_000, limit: 250 },
      ];
      for (const query of queries) {
        const { refs, sizes } = await pages(query);
        const expected = all.filter(
          (r) =>
            (query.state === undefined || r.state === query.state) &&
            (query.tenant === undefined || r.tenant === query.tenant) &&
            (query.action === undefined || r.action === query.action) &&
            (query.updatedBefore === undefined || r.updatedAt <= query.updatedBefore),
        );
        expect(expected.length).toBeGreaterThan(query.limit);
        expect(new Set(refs).size, `${JSON.stringify(query)}: a record listed twice`).toBe(refs.length);
        expect(new Set(refs), JSON.stringify(query)).toEqual(new Set(expected.map(recordRef)));
        expect(sizes.at(-1)).toBeLessThanOrEqual(query.limit);
      }
    }, 120_000);
  });
}
