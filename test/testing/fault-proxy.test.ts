import { afterEach, describe, expect, it } from 'vitest';
import { faultProxy } from '../../src/testing/fault-proxy.js';
import { recordingDownstream } from '../../src/testing/recording-downstream.js';

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

async function setUp(plan: Parameters<typeof faultProxy>[0]['plan']) {
  const downstream = await recordingDownstream();
  closers.push(downstream.close);
  const proxy = await faultProxy({ target: downstream.url, plan });
  closers.push(proxy.close);
  const post = (key: string, body: object = { amount: 5 }) =>
    fetch(`${proxy.url}/charges`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify(body),
    });
  return { downstream, proxy, post };
}

describe('faultProxy', () => {
  it('drops the answer of the nth request after the upstream made the effect; the retry gets the first effect', async () => {
    const { downstream, proxy, post } = await setUp([{ nth: 1, fault: 'drop-response' }]);
    await expect(post('k1')).rejects.toThrow();
    // The upstream did the work: the answer alone was lost.
    expect(downstream.effects).toHaveLength(1);
    const retry = await post('k1');
    expect(retry.status).toBe(200);
    expect(await retry.json()).toMatchObject({ id: 'eff_1', key: 'k1', amount: 5 });
    expect(downstream.effects).toHaveLength(1);
    expect(downstream.callsWith('k1')).toBe(2);
    expect(proxy.requests.map((r) => [r.n, r.key, r.fault, r.upstreamStatus])).toEqual([
      [1, 'k1', 'drop-response', 201],
      [2, 'k1', undefined, 200],
    ]);
  });

  it('cuts the body midway: the client sees the status, then a broken body', async () => {
    const { downstream, post } = await setUp([{ nth: 2, fault: 'cut-body' }]);
    expect((await post('a')).status).toBe(201);
    const cut = await post('b', { note: 'x'.repeat(2_000) });
    expect(cut.status).toBe(201);
    await expect(cut.text()).rejects.toThrow();
    expect(downstream.effects.map((e) => e.key)).toEqual(['a', 'b']);
  });

  it('answers 503 without forwarding, and delays the one it names', async () => {
    const isPost = (r: { method: string }) => r.method === 'POST';
    const { downstream, proxy, post } = await setUp([
      { nth: 1, fault: 'unavailable', match: isPost },
      { nth: 2, fault: 'delay', delay: 300, match: isPost },
    ]);
    const refused = await post('k');
    expect(refused.status).toBe(503);
    expect(downstream.calls).toHaveLength(0);
    const started = performance.now();
    expect((await post('k')).status).toBe(201);
    // Held at least the plan's delay (a floor, not a speed assertion).
    expect(performance.now() - started).toBeGreaterThanOrEqual(290);
    expect(proxy.requests.map((r) => r.fault)).toEqual(['unavailable', 'delay']);
  });

  it('refuses a plan it cannot follow with INVALID_ARGUMENT', async () => {
    await expect(
      faultProxy({ target: 'http://127.0.0.1:1', plan: [{ nth: 0, fault: 'delay' }] }),
    ).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(
      faultProxy({ target: 'http://127.0.0.1:1', plan: [{ nth: 1, fault: 'explode' as 'delay' }] }),
    ).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
  });
});

describe('recordingDownstream', () => {
  it('makes one effect per key, one per keyless call, and answers a lookup by key', async () => {
    const downstream = await recordingDownstream();
    closers.push(downstream.close);
    const send = (key?: string) =>
      fetch(`${downstream.url}/mail`, {
        method: 'POST',
        headers: key ? { 'idempotency-key': key } : {},
        body: JSON.stringify({ to: 'a@b' }),
      });
    await send('m1');
    await send('m1');
    await send();
    await send();
    expect(downstream.effects.map((e) => e.key)).toEqual(['m1', undefined, undefined]);
    expect(downstream.calls.map((c) => c.fresh)).toEqual([true, false, true, true]);
    const found = await fetch(`${downstream.url}/mail`, { headers: { 'idempotency-key': 'm1' } });
    expect(await found.json()).toMatchObject({ id: 'eff_1', to: 'a@b' });
    expect((await fetch(`${downstream.url}/mail`, { headers: { 'idempotency-key': 'nope' } })).status).toBe(404);
  });
});
