/**
 * `POST /v1/invoke` answers an execution under a key with `Oncely-Attempt`: the record's attempt
 * that ran it. A second execution of one key (a claim-first handler's released failure here, a
 * takeover after a crash in the shop's kit tests) says 2; a replay says `Idempotent-Replayed` and
 * the attempt of the answer it replays; a keyless call has no record and no attempt. oncely/testing's `invokeResult` reads
 * it, so the kit reports an execution above the first attempt as `taken over`.
 */
import { afterAll, describe, expect, it } from 'vitest';
import type { HandlerModule } from '../../src/host/app.js';
import { invokeResult } from '../../src/testing/index.js';
import { gotOf, outcomeOf } from '../../src/testing/outcome.js';
import { hostTargets, startHost } from '../support/host-app.js';

const SCHEMA = 'CREATE TABLE IF NOT EXISTS attempt_marks (id TEXT PRIMARY KEY)';

const mark: HandlerModule = {
  async handle(input, ctx) {
    const { id } = input as { id: string };
    await ctx.store.createIfAbsent('attempt_marks', { id }, ['id']);
    return { id };
  },
};

describe.each(hostTargets())('host on $name: POST /v1/invoke says which attempt ran', ({ target, cleanup }) => {
  afterAll(cleanup);

  it("Oncely-Attempt on executions (1, then 2 after a released claim), a replay's is the first answer's, none on keyless calls", async () => {
    let failures = 1;
    const flaky: HandlerModule = {
      effects: 'external',
      async handle(input, ctx) {
        if (failures-- > 0) throw new Error('the gateway timed out');
        return mark.handle(input, ctx);
      },
    };
    const app = await startHost(target(), {
      schemaSql: SCHEMA,
      handlers: {
        'marks.make': mark,
        'marks.flaky': flaky,
        'marks.keyless': { ...mark, idempotency: { required: false } },
      },
    });
    try {
      const make = { 'idempotency-key': '"make-1"' };
      const first = await app.invoke('marks.make', { id: 'make-1' }, make);
      expect(first.status).toBe(200);
      expect(first.headers.get('oncely-attempt')).toBe('1');
      const again = await app.invoke('marks.make', { id: 'make-1' }, make);
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(again.headers.get('oncely-attempt')).toBe('1');

      const flakyKey = { 'idempotency-key': '"flaky-1"' };
      const failed = await app.invoke('marks.flaky', { id: 'flaky-1' }, flakyKey);
      expect(failed.status).toBe(500);
      // The claim was committed first: its attempt ran, and failed.
      expect(failed.headers.get('oncely-attempt')).toBe('1');
      const retried = await app.invoke('marks.flaky', { id: 'flaky-1' }, flakyKey);
      expect(retried.status).toBe(200);
      expect(retried.headers.get('idempotent-replayed')).toBeNull();
      expect(retried.headers.get('oncely-attempt')).toBe('2');
      const replay = await app.invoke('marks.flaky', { id: 'flaky-1' }, flakyKey);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.headers.get('oncely-attempt')).toBe('2');

      const keyless = await app.invoke('marks.keyless', { id: 'keyless-1' });
      expect(keyless.status).toBe(200);
      expect(keyless.headers.get('oncely-attempt')).toBeNull();

      // The kit's reading of the same answers, over HTTP: a first execution, a replay, a second attempt.
      const call = (handler: string, id: string) =>
        fetch(`${app.base}/v1/invoke/${handler}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'idempotency-key': `"${id}"` },
          body: JSON.stringify({ id }),
        }).then(invokeResult);
      failures = 1;
      const got: string[] = [];
      for (const [handler, id] of [
        ['marks.make', 'make-2'],
        ['marks.make', 'make-2'],
        ['marks.flaky', 'flaky-2'],
        ['marks.flaky', 'flaky-2'],
        ['marks.flaky', 'flaky-2'],
      ] as const) {
        const settled = await call(handler, id).then(
          (value) => ({ status: 'fulfilled' as const, value }),
          (reason: unknown) => ({ status: 'rejected' as const, reason }),
        );
        got.push(gotOf(outcomeOf(got.length, 'sequential', settled)));
      }
      expect(got).toEqual(['executed', 'replayed', 'HANDLER_FAILED', 'taken over', 'replayed']);
      expect(await app.rows('SELECT id FROM attempt_marks ORDER BY id')).toHaveLength(5);
    } finally {
      await app.stop();
    }
  });
});
