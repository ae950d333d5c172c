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

/** What an answer is on the wire: status, headers (the server's Date aside) and the body's bytes. */
async function wire(response: Response) {
  const headers = Object.fromEntries([...response.headers].filter(([name]) => name !== 'date'));
  return { status: response.status, headers, body: Buffer.from(await response.arrayBuffer()) };
}

describe.each(hostTargets())('review3.17: host on $name: a replay is the first answer', ({ target, cleanup }) => {
  afterAll(cleanup);

  it("has the first answer's status and body byte for byte, and its headers but for Idempotent-Replayed and X-Request-Id", async () => {
    const declined: HandlerModule = {
      effects: 'external',
      onError: 'store',
      handle() {
        throw Object.assign(new Error('card declined'), { status: 402, code: 'CARD_DECLINED' });
      },
    };
    const app = await startHost(target(), {
      schemaSql: SCHEMA,
      handlers: { 'marks.make': mark, 'marks.external': external, 'marks.declined': declined },
    });
    try {
      for (const handler of ['marks.make', 'marks.external', 'marks.declined']) {
        const send = (requestId: string, traceId: string) =>
          fetch(`${app.base}/v1/invoke/${handler}`, {
            method: 'POST',
            headers: {
              'content-type': 'application/json',
              'idempotency-key': `"order-ORD-1-${handler}"`,
              'x-request-id': requestId,
              'oncely-trace-id': traceId,
            },
            body: JSON.stringify({ id: handler }),
          }).then(wire);
        const first = await send(`first-${handler}`, `trace-${handler}`);
        // A retry sends its own request id, and even another trace id: the record's is kept.
        const replay = await send(`second-${handler}`, 'another-trace');
        expect(first.headers['idempotent-replayed'], handler).toBeUndefined();
        expect(first.headers['oncely-attempt'], handler).toBe('1');
        expect(replay.status, handler).toBe(first.status);
        expect(replay.body.equals(first.body), `${handler}: ${replay.body} vs ${first.body}`).toBe(true);
        expect(replay.headers, handler).toEqual({
          ...first.headers,
          'idempotent-replayed': 'true',
          'x-request-id': `second-${handler}`,
        });
        // The envelope names the request that ran the handler, and the intent's trace.
        expect(JSON.parse(first.body.toString()), handler).toMatchObject({
          traceId: `trace-${handler}`,
          requestId: `first-${handler}`,
        });
      }
      expect(await app.rows('SELECT id FROM replayed_marks ORDER BY id')).toEqual([
        { id: 'marks.external' },
        { id: 'marks.make' },
      ]);
    } finally {
      await app.stop();
    }
  });
});
