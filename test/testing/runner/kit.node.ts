/**
 * The kit under node:test, no vitest anywhere: run by runner-agnostic.test.ts as
 * `node --import tsx --test`. One storm that holds, one that must fail, one lost response.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createOncely } from '../../../src/index.js';
import { sqliteStore } from '../../../src/sqlite/index.js';
import { faultProxy, recordingDownstream, StormFailedError, storm } from '../../../src/testing/index.js';

test('a wrapped charge holds one effect under a storm, through a proxy that loses the first answer', async () => {
  const gateway = await recordingDownstream();
  const proxy = await faultProxy({ target: gateway.url, plan: [{ nth: 1, fault: 'drop-response' }] });
  const once = await createOncely({ store: sqliteStore({ path: ':memory:' }) });
  const charge = once.wrap(
    { action: 'charge', key: (orderId: string) => [orderId, 'charge'], wait: '5s' },
    async (orderId, ctx) => {
      // The gateway's answer may be lost: the error releases the key, the next attempt posts the same key.
      const res = await fetch(`${proxy.url}/charges`, {
        method: 'POST',
        headers: { 'idempotency-key': ctx.idempotencyKey },
        body: JSON.stringify({ orderId }),
      });
      return (await res.json()) as { id: string };
    },
  );
  try {
    const report = await storm({
      run: () => charge('ORD-1'),
      effects: () => gateway.effects.length,
    });
    assert.equal(report.effects, 1);
    assert.equal(gateway.callsWith('ORD-1:charge'), 2);
    assert.equal(report.calls[0]?.ok, false);
  } finally {
    await once.close();
    await proxy.close();
    await gateway.close();
  }
});

test('a function without idempotency fails the storm with StormFailedError', async () => {
  let sent = 0;
  await assert.rejects(
    storm({ run: () => ++sent, sequential: 2, concurrent: 2, effects: () => sent }),
    (error: unknown) => error instanceof StormFailedError && /4 effects where 1 was expected/.test(error.message),
  );
});
