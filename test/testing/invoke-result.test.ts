/**
 * `invokeResult` reads a host's `/v1/invoke` answer the kit's way: `Idempotent-Replayed` says a
 * replay, `Oncely-Attempt` the record's attempt of an execution, so an execution above attempt 1
 * (a takeover) reports `taken over` without the test reading the record.
 */
import { describe, expect, it } from 'vitest';
import { invokeResult } from '../../src/testing/index.js';
import { gotOf, outcomeOf } from '../../src/testing/outcome.js';

const answer = (headers: Record<string, string>, body: unknown = { code: 0, data: { ok: true } }) =>
  new Response(JSON.stringify(body), { headers: { 'content-type': 'application/json', ...headers } });

async function got(res: Response): Promise<string> {
  const settled = await invokeResult(res).then(
    (value) => ({ status: 'fulfilled' as const, value }),
    (reason: unknown) => ({ status: 'rejected' as const, reason }),
  );
  return gotOf(outcomeOf(0, 'sequential', settled));
}

describe('invokeResult', () => {
  it('reports the attempt of an execution: 1 executed, above 1 taken over; a replay is replayed', async () => {
    expect(await invokeResult(answer({ 'oncely-attempt': '2' }))).toEqual({
      value: { ok: true },
      replayed: false,
      record: { attempts: 2 },
    });
    expect(await got(answer({ 'oncely-attempt': '1' }))).toBe('executed');
    expect(await got(answer({ 'oncely-attempt': '3' }))).toBe('taken over');
    expect(await got(answer({ 'idempotent-replayed': 'true' }))).toBe('replayed');
  });

  it('without the header (a keyless call, an older host) it is an execution, and a bad value is ignored', async () => {
    expect(await invokeResult(answer({}))).toEqual({ value: { ok: true }, replayed: false });
    expect(await got(answer({}))).toBe('executed');
    expect(await invokeResult(answer({ 'oncely-attempt': 'two' }))).toEqual({ value: { ok: true }, replayed: false });
  });

  it("throws an error answer's code and status", async () => {
    const res = new Response(JSON.stringify({ code: 409, error: { code: 'IN_PROGRESS', message: 'running' } }), {
      status: 409,
    });
    await expect(invokeResult(res)).rejects.toMatchObject({ code: 'IN_PROGRESS', status: 409, message: 'running' });
  });
});
