import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IdempotencyGate } from '../../src/http/gate.js';
import { createOncely, type Oncely } from '../../src/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';

// The gate as the host drives it: whole responses handed to finish(), no adapter cutting them.
describe('IdempotencyGate without an adapter', () => {
  let once: Oncely;
  beforeAll(async () => {
    once = await createOncely({ store: sqliteStore({ path: ':memory:' }) });
  });
  afterAll(() => once.close());
  let unique = 0;
  const facts = (key: string) => ({ method: 'POST', route: '/export', header: key, body: undefined, bodyBytes: 0 });
  const codeOf = (body: Uint8Array) => JSON.parse(Buffer.from(body).toString()).code as string;

  it('defect 11.11: a whole response over maxBodyBytes handed to finish is 409 RESPONSE_NOT_STORED to its duplicate', async () => {
    const gate = new IdempotencyGate<null>({ once, maxBodyBytes: 1000 });
    const key = `whole-${++unique}`;
    const start = await gate.begin(null, facts(key));
    if (start.kind !== 'execute') throw new Error(`expected a claim, got ${start.kind}`);
    const body = new Uint8Array(1001);
    const sent = await start.run.finish({ status: 200, headers: {}, body }, true);
    expect(sent.body.byteLength).toBe(1001);
    const duplicate = await gate.begin(null, facts(key));
    if (duplicate.kind !== 'respond') throw new Error(`expected an answer, got ${duplicate.kind}`);
    expect([duplicate.response.status, codeOf(duplicate.response.body)]).toEqual([409, 'RESPONSE_NOT_STORED']);
  });

  it('defect 11.11: a record the engine refused as RESULT_TOO_LARGE replays as 409 RESPONSE_NOT_STORED, never 500', async () => {
    const key = `refused-${++unique}`;
    // What an older gate left behind: the engine's default limit refused the encoded response.
    const input = { method: 'POST', action: 'POST /export' };
    await expect(
      once.run({ action: 'POST /export', key, input, maxResultBytes: 10 }, () => ({ body: 'x'.repeat(100) })),
    ).rejects.toMatchObject({ code: 'RESULT_TOO_LARGE' });
    const duplicate = await new IdempotencyGate<null>({ once }).begin(null, facts(key));
    if (duplicate.kind !== 'respond') throw new Error(`expected an answer, got ${duplicate.kind}`);
    expect([duplicate.response.status, codeOf(duplicate.response.body)]).toEqual([409, 'RESPONSE_NOT_STORED']);
  });

  it('storeStatuses picks the statuses kept, and store, its deprecated name, still does', async () => {
    const keptOn = async (options: { storeStatuses?: (s: number) => boolean; store?: (s: number) => boolean }) => {
      const gate = new IdempotencyGate<null>({ once, ...options });
      const kinds: string[] = [];
      for (const status of [201, 422]) {
        const key = `statuses-${++unique}`;
        const first = await gate.begin(null, facts(key));
        if (first.kind !== 'execute') throw new Error(`expected a claim, got ${first.kind}`);
        await first.run.finish({ status, headers: {}, body: new Uint8Array(0) }, true);
        const duplicate = await gate.begin(null, facts(key));
        kinds.push(duplicate.kind);
        if (duplicate.kind === 'execute') await duplicate.run.abandon(new Error('test done'));
      }
      return kinds;
    };
    const only2xx = (status: number) => status < 300;
    expect(await keptOn({})).toEqual(['respond', 'respond']);
    expect(await keptOn({ storeStatuses: only2xx })).toEqual(['respond', 'execute']);
    expect(await keptOn({ store: only2xx })).toEqual(['respond', 'execute']);
    expect(await keptOn({ storeStatuses: only2xx, store: () => true })).toEqual(['respond', 'execute']);
  });
});
