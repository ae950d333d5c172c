/**
 * Across processes, one store each: a process killed with SIGKILL at each window (oncely/testing's
 * crashWindows under 'retry'), and after the claim or the effect under 'hold'.
 */
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { expect, it } from 'vitest';
import { crashWindows, recordingDownstream } from '../../src/testing/index.js';
import { startWorker } from '../support/spawn.js';
import type { KitCharge } from './support/kit-charge.js';
import { describeEachStore, makeSink, sleep } from './support/processes.js';

const KIT_CHARGE = fileURLToPath(new URL('./support/kit-charge.ts', import.meta.url));

describeEachStore('crashes across processes', (on) => {
  async function crash(options: { effect: boolean; policy: 'retry' | 'hold' }) {
    const action = `crash-${randomUUID().slice(0, 8)}`;
    const key = 'ORD-7:charge';
    const sink = makeSink();
    const lease = 600;
    const worker = startWorker({
      store: on.spec,
      mode: 'hang',
      action,
      key,
      lease,
      effect: options.effect,
      onLeaseExpired: options.policy,
      sink: sink.path,
    });
    await worker.waitFor(options.effect ? 'effect' : 'claimed');
    worker.child.kill('SIGKILL');
    expect((await worker.exited).signal).toBe('SIGKILL');
    const request = { action, key, lease, onLeaseExpired: options.policy };
    const retried: string[] = [];
    const fn = async (ctx: { idempotencyKey: string; attempt: number }) => {
      retried.push(ctx.idempotencyKey);
      const db = new Database(sink.path);
      db.pragma('busy_timeout = 5000');
      db.prepare('INSERT OR IGNORE INTO effects (idempotency_key, done_by) VALUES (?, ?)').run(
        ctx.idempotencyKey,
        'retry',
      );
      db.prepare('INSERT INTO calls (idempotency_key, done_by) VALUES (?, ?)').run(ctx.idempotencyKey, 'retry');
      db.close();
      return { attempt: ctx.attempt };
    };
    // While the dead holder's lease lasts, nobody runs the action.
    await expect(on.once.run(request, fn)).rejects.toMatchObject({ code: 'IN_PROGRESS' });
    // sleep: the dead holder's lease must run out before a fresh process may take over.
    await sleep(lease + 100);
    return { request, fn, retried, sink, key };
  }

  it("kill -9 at each window under 'retry' (oncely/testing's crashWindows): a fresh process takes over with the same key, or replays; one effect each", async () => {
    const action = `crash-${randomUUID().slice(0, 8)}`;
    const gateway = await recordingDownstream();
    try {
      const report = await crashWindows({
        child: { module: KIT_CHARGE, export: 'charge' },
        parallel: true,
        input: (window): KitCharge => ({
          store: on.spec,
          action,
          key: `ORD-${window}:charge`,
          gateway: gateway.url,
          lease: 600,
          onLeaseExpired: 'retry',
        }),
        effects: (window) => gateway.effects.filter((e) => e.key === `ORD-${window}:charge`).length,
      });
      expect(report.cases.map((c) => [c.window, c.got, c.retry.attempts, c.effects])).toEqual([
        ['claimed', 'taken over', 2, 1],
        ['before-effect', 'taken over', 2, 1],
        ['after-effect', 'taken over', 2, 1],
        ['completed', 'replayed', 1, 1],
      ]);
      // Killed after its effect: the takeover posted the same key again, the downstream's dedupe held.
      expect(gateway.callsWith('ORD-after-effect:charge')).toBe(2);
      expect(gateway.callsWith('ORD-claimed:charge')).toBe(1);
      const record = await on.once.get(action, 'ORD-after-effect:charge');
      expect(record).toMatchObject({ state: 'succeeded', attempts: 2 });
    } finally {
      await gateway.close();
    }
  }, 60_000);

  it("kill -9 after the effect under 'hold': callers get OUTCOME_UNKNOWN until a person resolves it", async () => {
    const { request, fn, retried, sink, key } = await crash({ effect: true, policy: 'hold' });
    await expect(on.once.run(request, fn)).rejects.toMatchObject({ code: 'OUTCOME_UNKNOWN' });
    await expect(on.once.run(request, fn)).rejects.toMatchObject({ code: 'OUTCOME_UNKNOWN' });
    expect(retried).toEqual([]);
    expect(sink.effects(key)).toBe(1);
    await on.once.resolve(request.action, key, { value: { attempt: 1 } });
    expect(await on.once.run(request, fn)).toMatchObject({ replayed: true, value: { attempt: 1 } });
  });

  it("kill -9 after the claim under 'hold' and resolved with 'retry': the next caller executes once", async () => {
    const { request, fn, retried, sink, key } = await crash({ effect: false, policy: 'hold' });
    await expect(on.once.run(request, fn)).rejects.toMatchObject({ code: 'OUTCOME_UNKNOWN' });
    await on.once.resolve(request.action, key, 'retry');
    expect(await on.once.run(request, fn)).toMatchObject({ replayed: false, value: { attempt: 2 } });
    expect(retried).toEqual([key]);
    expect(sink.effects(key)).toBe(1);
  });
});
