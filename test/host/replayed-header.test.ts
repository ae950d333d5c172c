import { afterAll, describe, expect, it } from 'vitest';
import type { HandlerModule } from '../../src/host/app.js';
import { hostTargets, startHost } from '../support/host-app.js';

const SCHEMA = 'CREATE TABLE IF NOT EXISTS replayed_marks (id TEXT PRIMARY KEY)';

const mark: HandlerModule = {
  async handle(input, ctx) {
    const { id } = input as { id: string };
    await ctx.store.createIfAbsent('replayed_marks', { id }, ['id']);
    return { id };
  },
};

/** effects 'external': claim first, its replays come from the record committed on its own. */
const external: HandlerModule = { ...mark, effects: 'external' };

describe.each(hostTargets())('host on $name: POST /v1/invoke says when it replayed', ({ target, cleanup }) => {
  afterAll(cleanup);

  it('Idempotent-Replayed: true on a replay only, for a keyed handler and a claim-first one; none without a key', async () => {
    const app = await startHost(target(), {
      schemaSql: SCHEMA,
      handlers: {
        'marks.make': mark,
        'marks.external': external,
        'marks.keyless': { ...mark, idempotency: { required: false } },
      },
    });
    try {
      for (const handler of ['marks.make', 'marks.external']) {
        const headers = { 'idempotency-key': `"${handler}-1"` };
        const first = await app.invoke(handler, { id: handler }, headers);
        expect(first.status, handler).toBe(200);
        expect(first.headers.get('idempotent-replayed'), handler).toBeNull();
        const again = await app.invoke(handler, { id: handler }, headers);
        expect(again.status, handler).toBe(200);
        expect(again.headers.get('idempotent-replayed'), handler).toBe('true');
        expect(again.body, handler).toMatchObject({ code: 0, data: { id: handler } });
      }
      for (const n of [1, 2]) {
        const keyless = await app.invoke('marks.keyless', { id: `keyless-${n}` });
        expect(keyless.status).toBe(200);
        expect(keyless.headers.get('idempotent-replayed')).toBeNull();
      }
      expect(await app.rows('SELECT id FROM replayed_marks ORDER BY id')).toHaveLength(4);
    } finally {
      await app.stop();
    }
  });
});
