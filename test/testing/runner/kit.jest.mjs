/**
 * The kit under Jest (ESM, no transform), no vitest anywhere: run by runner-agnostic.test.ts as
 * `node --experimental-vm-modules node_modules/jest/bin/jest.js`, importing the built package
 * as a user would (`oncely/...`). One storm that holds through a lost answer, one that must fail.
 */
import { expect, test } from '@jest/globals';
import { createOncely } from 'oncely';
import { sqliteStore } from 'oncely/sqlite';
import { faultProxy, recordingDownstream, StormFailedError, storm } from 'oncely/testing';

test('a wrapped charge holds one effect under a storm, through a proxy that loses the first answer', async () => {
  const gateway = await recordingDownstream();
  const proxy = await faultProxy({ target: gateway.url, plan: [{ nth: 1, fault: 'drop-response' }] });
  const once = await createOncely({ store: sqliteStore({ path: ':memory:' }) });
  const charge = once.wrap(
    { action: 'charge', key: (orderId) => [orderId, 'charge'], wait: '5s' },
    async (orderId, ctx) => {
      const res = await fetch(`${proxy.url}/charges`, {
        method: 'POST',
        headers: { 'idempotency-key': ctx.idempotencyKey },
        body: JSON.stringify({ orderId }),
      });
      return await res.json();
    },
  );
  try {
    const report = await storm({ run: () => charge('ORD-1'), effects: () => gateway.effects.length });
    expect(report.effects).toBe(1);
    expect(gateway.callsWith('ORD-1:charge')).toBe(2);
    expect(report.calls[0]?.ok).toBe(false);
  } finally {
    await once.close();
    await proxy.close();
    await gateway.close();
  }
});

test('a function without idempotency fails the storm with StormFailedError', async () => {
  let sent = 0;
  const error = await storm({ run: () => ++sent, sequential: 2, concurrent: 2, effects: () => sent }).catch((e) => e);
  expect(error).toBeInstanceOf(StormFailedError);
  expect(error.message).toMatch(/4 effects where 1 was expected/);
});
