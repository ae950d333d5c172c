import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Metrics } from '../../src/core/metrics.js';
import { type Db, openDb } from '../../src/db/index.js';
import { type AnyFlow, createFlows, defineFlow, type Flows, type FlowsOptions } from '../../src/flows/index.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { selectStores } from '../support/store-filter.js';
import { until } from '../support/wait.js';

// sleep: for a step that takes time, and for windows in which something must not happen.
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const uid = () => randomUUID().replaceAll('-', '').slice(0, 8);

/** The error a promise rejects with; fails the test if it resolves. */
async function failure(promise: Promise<unknown>): Promise<{ code: string; message: string }> {
  try {
    await promise;
  } catch (error) {
    return error as { code: string; message: string };
  }
  throw new Error('expected a rejection');
}

/** An error a step's retry policy treats as final (a declined card). */
class Declined extends Error {
  readonly code = 'DECLINED';
}

/** The flows suite, on one database that every test shares; each test declares flows of its own names. */
function describeFlows(name: string, open: () => Promise<{ target: string; cleanup: () => Promise<void> }>) {
  describe(`flows: ${name}`, () => {
    let target: string;
    let cleanup: () => Promise<void>;
    let db: Db;
    const opened: Flows[] = [];
    const extraDbs: Db[] = [];

    beforeAll(async () => {
      ({ target, cleanup } = await open());
      db = await openDb(target);
    });
    afterEach(async () => {
      for (const flows of opened.splice(0)) await flows.stop();
    });
    afterAll(async () => {
      for (const extra of extraDbs.splice(0)) await extra.close();
      await db?.close();
      await cleanup?.();
    });

    /** A Flows API on the shared database (or on `on`), stopped after the test. */
    async function flowsOf(defs: AnyFlow[], options: Partial<FlowsOptions> & { worker?: boolean } = {}) {
      const { worker = true, ...rest } = options;
      const flows = await createFlows({ db, flows: defs, poll: '20ms', lease: '5s', ...rest });
      opened.push(flows);
      if (worker) await flows.startWorker();
      return flows;
    }
    /** Another connection to the same database, as a second process would have. */
    async function otherDb() {
      const other = await openDb(target);
      extraDbs.push(other);
      return other;
    }

    it('a duplicate start returns the same workflowId with already: true, and never runs the flow twice', async () => {
      const flowName = `order-${uid()}`;
      let executions = 0;
      const def = defineFlow<{ order: string; line: number }, string>(
        flowName,
        { seed: ['order', 'line'] },
        async (run, input) => {
          executions++;
          return run.step('charge', () => `charged ${input.order}`);
        },
      );
      const flows = await flowsOf([def]);
      const input = { order: 'ORD-1', line: 2 };
      const starts = await Promise.all(Array.from({ length: 10 }, () => flows.start(def, input)));
      const workflowId = `${flowName}-ORD-1:2`;
      expect(starts.every((s) => s.workflowId === workflowId)).toBe(true);
      expect(starts.filter((s) => !s.already)).toHaveLength(1);
      expect(await flows.result(workflowId, { timeout: '10s' })).toBe('charged ORD-1');
      // After completion, too: the same id, already, and no second run.
      expect(await flows.start(def, { line: 2, order: 'ORD-1' })).toEqual({ workflowId, already: true });
      // sleep: a window in which a second run must not happen.
      await sleep(100);
      expect(executions).toBe(1);
      const record = await flows.get(workflowId);
      expect(record).toMatchObject({ status: 'completed', runs: 1, bizId: 'ORD-1:2', name: flowName });
      expect((await flows.list({ status: 'completed', limit: 10_000 })).map((f) => f.workflowId)).toContain(workflowId);
    });

    it('another input under the same seed is FLOW_INPUT_MISMATCH naming the seed; a missing seed field is KEY_REQUIRED', async () => {
      const flowName = `ship-${uid()}`;
      const def = defineFlow<{ event_id?: string; video_file_id?: string; note?: string }, null>(
        flowName,
        { seed: ['event_id', 'video_file_id'] },
        async () => null,
      );
      const flows = await flowsOf([def], { worker: false });
      const first = await flows.start(def, { event_id: 'E1', video_file_id: 'V1', note: 'a' });
      expect(first).toEqual({ workflowId: `${flowName}-E1:V1`, already: false });
      const mismatch = await flows.start(def, { event_id: 'E1', video_file_id: 'V1', note: 'b' }).catch((e) => e);
      expect(mismatch.code).toBe('FLOW_INPUT_MISMATCH');
      expect(mismatch.message).toContain('event_id, video_file_id');
      expect(mismatch.message).toContain(first.workflowId);
      const missing = await flows.start(def, { event_id: 'E2', note: 'a' }).catch((e) => e);
      expect(missing.code).toBe('KEY_REQUIRED');
      expect(missing.message).toContain('video_file_id');
      expect(await flows.list({ limit: 10_000 }).then((all) => all.filter((f) => f.name === flowName))).toHaveLength(1);
    });

    it('after a restart the flow resumes: completed steps are not executed again, step keys are workflowId:stepId', async () => {
      const flowName = `resume-${uid()}`;
      const executions: Record<string, number> = {};
      const keys: string[] = [];
      const def = defineFlow<{ id: string }, unknown>(flowName, { seed: ['id'] }, async (run) => {
        const a = await run.step('cut', (s) => {
          executions.cut = (executions.cut ?? 0) + 1;
          keys.push(s.idempotencyKey, s.subKey(0), s.subKey('x'));
          return { clip: 'c1' };
        });
        await run.step('push', (s) => {
          executions.push = (executions.push ?? 0) + 1;
          keys.push(s.idempotencyKey);
        });
        const go = await run.waitFor<{ ok: boolean }>('go');
        const after = await run.step('notify', (s) => {
          executions.notify = (executions.notify ?? 0) + 1;
          keys.push(s.idempotencyKey);
          return 'sent';
        });
        return { a, go, after, flowKey: run.subKey(3) };
      });
      const first = await flowsOf([def]);
      const { workflowId } = await first.start(def, { id: 'R1' });
      await until(
        'the flow waiting',
        async () => (await first.get(workflowId))?.status,
        (status) => status === 'waiting',
      );
      await first.stop();

      // A second instance on its own connection, as after a redeploy: the flow goes on from the wait.
      const second = await flowsOf([def], { db: await otherDb() });
      expect(await second.signal(workflowId, 'go', { ok: true }, { signalId: 'go-1' })).toBe(true);
      expect(await second.result(workflowId, { timeout: '10s' })).toEqual({
        a: { clip: 'c1' },
        go: { ok: true },
        after: 'sent',
        flowKey: `${workflowId}:3`,
      });
      expect(executions).toEqual({ cut: 1, push: 1, notify: 1 });
      expect(keys).toEqual([
        `${workflowId}:cut`,
        `${workflowId}:cut:0`,
        `${workflowId}:cut:x`,
        `${workflowId}:push`,
        `${workflowId}:notify`,
      ]);
      const shown = await second.show(workflowId);
      expect(shown?.runs).toBe(2);
      expect(shown?.steps.map((s) => [s.stepId, s.status])).toEqual([
        ['cut', 'completed'],
        ['push', 'completed'],
        ['wait:go:1', 'completed'],
        ['notify', 'completed'],
      ]);
    });

    it('a step id used twice in one run runs once: the second call returns the stored value', async () => {
      const flowName = `twice-${uid()}`;
      let executions = 0;
      const def = defineFlow<{ id: string }, unknown>(flowName, { seed: ['id'] }, async (run) => [
        await run.step('send', () => ++executions),
        await run.step('send', () => ++executions),
      ]);
      const flows = await flowsOf([def]);
      const { workflowId } = await flows.start(def, { id: 'T1' });
      expect(await flows.result(workflowId, { timeout: '10s' })).toEqual([1, 1]);
      expect(executions).toBe(1);
    });

    it('a worker that lost its lease is taken over: the takeover runs the step with the same key, the loser stops', async () => {
      const flowName = `takeover-${uid()}`;
      const calls: { key: string; sub: string; attempt: number }[] = [];
      let release!: () => void;
      const blocked = new Promise<void>((r) => {
        release = r;
      });
      let after = 0;
      let first: Flows | undefined;
      const def = defineFlow<{ id: string }, string>(flowName, { seed: ['id'] }, async (run) => {
        const v = await run.step('send', async (s) => {
          calls.push({ key: s.idempotencyKey, sub: s.subKey(1), attempt: s.attempt });
          // The first worker's execution hangs (a stalled process); the takeover's goes through.
          if (calls.length === 1) await blocked;
          return `sent by ${calls.length}`;
        });
        await run.step('after', () => {
          after++;
        });
        return v;
      });
      first = await flowsOf([def], { lease: '300ms', concurrency: 1 });
      const { workflowId } = await first.start(def, { id: 'T1' });
      await until('the first send', () => calls.length === 1);
      // The first worker stalls long enough for its lease to run out and another worker to claim the
      // flow. The fence moves on as well, as that claim moves it: otherwise the stalled worker's next
      // renewal (every 100 ms) could extend the lease before the second worker polls, on a busy machine.
      await db.run(
        `UPDATE oncely_flows SET lease_owner = 'stalled', lease_until = 0, fence = fence + 1 WHERE workflow_id = ?`,
        [workflowId],
      );
      const second = await flowsOf([def], { db: await otherDb(), lease: '5s' });
      expect(await second.result(workflowId, { timeout: '10s' })).toBe('sent by 2');
      // The stalled worker learns at its next renewal (a third of its lease) that the flow is no longer
      // its own. Its execution then finishes late: its result loses to the stored one and its run stops.
      // sleep: the stalled worker's next renewal (every 100 ms) comes before it is released.
      await sleep(250);
      release();
      await first.stop();
      first = undefined;
      expect(calls.map((c) => c.key)).toEqual([`${workflowId}:send`, `${workflowId}:send`]);
      expect(calls.map((c) => c.sub)).toEqual([`${workflowId}:send:1`, `${workflowId}:send:1`]);
      expect(after).toBe(1);
      const shown = await second.show(workflowId);
      expect(shown?.status).toBe('completed');
      expect(shown?.result).toBe('sent by 2');
      expect(shown?.runs).toBe(2);
    });

    it('a step failing twice then succeeding is retried with backoff: attempts 3, the same key each time', async () => {
      const flowName = `retry-${uid()}`;
      const tries: { key: string; attempt: number; at: number }[] = [];
      const def = defineFlow<{ id: string }, string>(flowName, { seed: ['id'] }, async (run) =>
        run.step(
          'flaky',
          (s) => {
            tries.push({ key: s.idempotencyKey, attempt: s.attempt, at: Date.now() });
            if (tries.length < 3) throw new Error(`timeout ${tries.length}`);
            return 'ok';
          },
          { retry: { attempts: 3, backoff: '40ms' } },
        ),
      );
      const flows = await flowsOf([def]);
      const { workflowId } = await flows.start(def, { id: 'F1' });
      expect(await flows.result(workflowId, { timeout: '10s' })).toBe('ok');
      expect(tries.map((t) => t.attempt)).toEqual([1, 2, 3]);
      expect(new Set(tries.map((t) => t.key))).toEqual(new Set([`${workflowId}:flaky`]));
      // Full jitter: each wait is at most backoff * 2^(attempt-1).
      expect((tries[1]?.at ?? 0) - (tries[0]?.at ?? 0)).toBeLessThan(40 + 30);
      expect((tries[2]?.at ?? 0) - (tries[1]?.at ?? 0)).toBeLessThan(80 + 30);
      const step = (await flows.show(workflowId))?.steps.find((s) => s.stepId === 'flaky');
      // A completed step keeps its last failed attempt's error: why it was retried.
      expect(step).toMatchObject({
        status: 'completed',
        attempts: 3,
        result: 'ok',
        error: { code: 'STEP_ERROR', message: 'timeout 2' },
      });
    });

    it('a final error fails the flow at once, without retries', async () => {
      const flowName = `final-${uid()}`;
      let tries = 0;
      const def = defineFlow<{ id: string }, string>(flowName, { seed: ['id'] }, async (run) =>
        run.step(
          'charge',
          () => {
            tries++;
            throw new Declined('card declined');
          },
          { retry: { attempts: 5, backoff: '10ms', final: (e) => e instanceof Declined } },
        ),
      );
      const flows = await flowsOf([def]);
      const { workflowId } = await flows.start(def, { id: 'D1' });
      const error = await failure(flows.result(workflowId, { timeout: '10s' }));
      expect(error.code).toBe('FLOW_FAILED');
      expect(error.message).toContain('card declined');
      expect(tries).toBe(1);
      const shown = await flows.show(workflowId);
      expect(shown?.status).toBe('failed');
      expect(shown?.error).toMatchObject({ code: 'DECLINED' });
      expect(shown?.steps).toEqual([
        expect.objectContaining({
          stepId: 'charge',
          status: 'failed',
          attempts: 1,
          error: { name: 'Error', message: 'card declined', code: 'DECLINED' },
        }),
      ]);
    });

    it('exhausted retries leave the flow failed with its error; retry resumes it from the failed step', async () => {
      const flowName = `dead-${uid()}`;
      const executions = { reserve: 0, pay: 0, ship: 0 };
      let down = true;
      const def = defineFlow<{ id: string }, string>(flowName, { seed: ['id'] }, async (run) => {
        await run.step('reserve', () => {
          executions.reserve++;
          return 'r';
        });
        const paid = await run.step(
          'pay',
          () => {
            executions.pay++;
            if (down) throw new Error('gateway down');
            return 'paid';
          },
          { retry: { attempts: 2, backoff: '10ms' } },
        );
        await run.step('ship', () => {
          executions.ship++;
        });
        return paid;
      });
      const flows = await flowsOf([def]);
      const { workflowId } = await flows.start(def, { id: 'X1' });
      expect((await failure(flows.result(workflowId, { timeout: '10s' }))).code).toBe('FLOW_FAILED');
      const dead = await flows.show(workflowId);
      expect(dead?.status).toBe('failed');
      expect(dead?.error?.message).toContain('gateway down');
      expect(dead?.error?.message).toContain('pay');
      expect(dead?.steps.find((s) => s.stepId === 'pay')).toMatchObject({ status: 'failed', attempts: 2 });
      expect((await flows.list({ status: 'failed', limit: 10_000 })).map((f) => f.workflowId)).toContain(workflowId);
      expect(executions).toEqual({ reserve: 1, pay: 2, ship: 0 });
      // Still failed after a while: a dead flow is kept, not retried by the worker.
      // sleep: a window in which the worker must not retry the dead flow.
      await sleep(150);
      expect((await flows.get(workflowId))?.status).toBe('failed');

      down = false;
      expect(await flows.retry(workflowId)).toBe(true);
      expect(await flows.result(workflowId, { timeout: '10s' })).toBe('paid');
      expect(executions).toEqual({ reserve: 1, pay: 3, ship: 1 });
      const done = await flows.show(workflowId);
      expect(done?.error).toBeNull();
      expect(done?.steps.find((s) => s.stepId === 'pay')).toMatchObject({ status: 'completed', attempts: 1 });
      // Only failed flows are retried.
      expect(await flows.retry(workflowId)).toBe(false);
      expect(await flows.retry(`${flowName}-nope`)).toBe(false);
    });

    it('signals: waitFor returns the payload, a duplicate signal id is ignored, the approval is kept with its time', async () => {
      const flowName = `approve-${uid()}`;
      let afterWait = 0;
      const def = defineFlow<{ id: string }, unknown>(flowName, { seed: ['id'] }, async (run) => {
        const approval = await run.waitFor<{ approver: string; approved: boolean }>('approval', { timeout: '1m' });
        afterWait++;
        return approval;
      });
      const flows = await flowsOf([def]);
      const { workflowId } = await flows.start(def, { id: 'A1' });
      await until(
        'the flow waiting',
        async () => (await flows.get(workflowId))?.status,
        (status) => status === 'waiting',
      );
      const before = Date.now();
      const payload = { approver: 'ana@example.com', approved: true };
      expect(await flows.signal(workflowId, 'approval', payload, { signalId: 'appr-1' })).toBe(true);
      expect(
        await flows.signal(workflowId, 'approval', { approver: 'eve', approved: false }, { signalId: 'appr-1' }),
      ).toBe(false);
      expect(await flows.result(workflowId, { timeout: '10s' })).toEqual(payload);
      // After completion too, the same id is still a duplicate.
      expect(await flows.signal(workflowId, 'approval', payload, { signalId: 'appr-1' })).toBe(false);
      await expect(
        flows.signal(`${workflowId}-missing`, 'approval', payload, { signalId: 'appr-1' }),
      ).rejects.toMatchObject({ code: 'NOT_FOUND' });
      expect(afterWait).toBe(1);
      const shown = await flows.show(workflowId);
      expect(shown?.signals).toHaveLength(1);
      expect(shown?.signals[0]).toMatchObject({ signalId: 'appr-1', name: 'approval', payload });
      expect(shown?.signals[0]?.receivedAt).toBeGreaterThanOrEqual(before);
      expect(shown?.signals[0]?.receivedAt).toBeLessThanOrEqual(Date.now());
      expect(shown?.steps.find((s) => s.stepId === 'wait:approval:1')).toMatchObject({
        status: 'completed',
        result: payload,
      });
    });

    it('a signal sent before the flow reaches waitFor is not lost; a second waitFor of the same name takes the next one', async () => {
      const flowName = `early-${uid()}`;
      const def = defineFlow<{ id: string }, unknown>(flowName, { seed: ['id'] }, async (run) => {
        const one = await run.waitFor<number>('tick');
        const two = await run.waitFor<number>('tick');
        return [one, two];
      });
      const flows = await flowsOf([def], { worker: false });
      const { workflowId } = await flows.start(def, { id: 'E1' });
      expect(await flows.signal(workflowId, 'tick', 1, { signalId: 't1' })).toBe(true);
      await flows.startWorker();
      await until(
        'the flow waiting at its second wait',
        () => flows.show(workflowId),
        (shown) => shown?.status === 'waiting' && shown.steps.some((s) => s.stepId === 'wait:tick:2'),
      );
      expect(await flows.signal(workflowId, 'tick', 2, { signalId: 't2' })).toBe(true);
      expect(await flows.result(workflowId, { timeout: '10s' })).toEqual([1, 2]);
    });

    it('a signal of a name nobody waits for does not keep rerunning a waiting flow', async () => {
      const flowName = `stray-${uid()}`;
      let runs = 0;
      const def = defineFlow<{ id: string }, unknown>(flowName, { seed: ['id'] }, async (run) => {
        runs++;
        return run.waitFor('approval');
      });
      const flows = await flowsOf([def]);
      const { workflowId } = await flows.start(def, { id: 'S1' });
      await until(
        'the flow waiting',
        async () => (await flows.get(workflowId))?.status,
        (status) => status === 'waiting',
      );
      await flows.signal(workflowId, 'something-else', null, { signalId: 'x1' });
      // sleep: a window in which a spinning flow would run again and again.
      await sleep(500);
      // One extra run to look is fine; a flow spinning until its real signal comes is not.
      expect(runs).toBeLessThanOrEqual(3);
      expect((await flows.get(workflowId))?.status).toBe('waiting');
      await flows.signal(workflowId, 'approval', 'yes', { signalId: 'a1' });
      expect(await flows.result(workflowId, { timeout: '10s' })).toBe('yes');
    });

    if (name === 'postgres')
      it('a signal that commits while the flow is deciding to wait still wakes it', async () => {
        const flowName = `race-${uid()}`;
        // The signal's transaction is held open, once its writes are done, until the flow is waiting
        // (or a second has passed): the interleaving that a busy database produces now and then.
        const other = await otherDb();
        let gate: string | undefined;
        const gated: Db = {
          ...other,
          transaction: (fn) =>
            other.transaction(async (tx) => {
              const result = await fn(tx);
              if (gate) {
                const id = gate;
                const status = async () =>
                  (await db.all<{ status: string }>('SELECT status FROM oncely_flows WHERE workflow_id = ?', [id]))[0]
                    ?.status;
                // Held at most a second: the flow may have taken the signal already, and never wait.
                await until('the flow waiting', status, (s) => s === 'waiting', {
                  timeoutMs: 1_000,
                  intervalMs: 10,
                }).catch(() => undefined);
              }
              return result;
            }),
        };
        const sender = await flowsOf([], { db: gated, worker: false });
        let sent: Promise<boolean> | undefined;
        const def = defineFlow<{ id: string }, unknown>(flowName, { seed: ['id'] }, async (run) => {
          await run.step('a', async () => {
            gate = run.workflowId;
            sent = sender.signal(run.workflowId, 'go', 'payload', { signalId: 'g1' });
            // sleep: the signal's writes are done while the step is still running: the race.
            await sleep(50);
          });
          return run.waitFor('go');
        });
        const flows = await flowsOf([def]);
        const { workflowId } = await flows.start(def, { id: 'G1' });
        const outcome = await flows.result(workflowId, { timeout: '3s' }).catch((e) => e);
        expect(await sent).toBe(true);
        expect(outcome).toBe('payload');
      });

    it('waitFor returns null once its timeout passes without a signal', async () => {
      const flowName = `timeout-${uid()}`;
      const def = defineFlow<{ id: string }, unknown>(flowName, { seed: ['id'] }, async (run) => {
        const started = await run.step('t0', () => Date.now());
        const approval = await run.waitFor('approval', { timeout: '300ms' });
        return { approval, waited: Date.now() - started };
      });
      const flows = await flowsOf([def]);
      const { workflowId } = await flows.start(def, { id: 'W1' });
      await until(
        'the flow waiting',
        async () => (await flows.get(workflowId))?.status,
        (status) => status === 'waiting',
      );
      const out = (await flows.result(workflowId, { timeout: '10s' })) as { approval: unknown; waited: number };
      expect(out.approval).toBeNull();
      expect(out.waited).toBeGreaterThanOrEqual(300);
      expect(out.waited).toBeLessThan(2_000);
      // A signal after the timeout does not change the outcome.
      expect(await flows.signal(workflowId, 'approval', 'late', { signalId: 'late-1' })).toBe(true);
      expect((await flows.get(workflowId))?.status).toBe('completed');
      expect((await flows.get(workflowId))?.result).toEqual(out);
    });

    it('compensation: a final failure undoes the completed steps once each, newest first, recorded and counted', async () => {
      const flowName = `saga-${uid()}`;
      const log: string[] = [];
      const undoKeys: string[] = [];
      const step = (id: string) => ({
        compensate: (value: unknown, s: { idempotencyKey: string }) => {
          log.push(`undo ${id} ${String(value)}`);
          undoKeys.push(s.idempotencyKey);
        },
      });
      const def = defineFlow<{ id: string }, unknown>(flowName, { seed: ['id'] }, async (run) => {
        await run.step('reserve', () => 'R', step('reserve'));
        await run.step('charge', () => 'C', step('charge'));
        await run.step('book', () => 'B', step('book'));
        await run.step(
          'ship',
          () => {
            log.push('ship');
            throw new Declined('no courier');
          },
          { retry: { final: (e) => e instanceof Declined }, ...step('ship') },
        );
      });
      const metrics = new Metrics();
      const flows = await flowsOf([def], { metrics });
      const { workflowId } = await flows.start(def, { id: 'C1' });
      expect((await failure(flows.result(workflowId, { timeout: '10s' }))).code).toBe('FLOW_FAILED');
      expect(log).toEqual(['ship', 'undo book B', 'undo charge C', 'undo reserve R']);
      expect(undoKeys).toEqual([
        `${workflowId}:compensate:book`,
        `${workflowId}:compensate:charge`,
        `${workflowId}:compensate:reserve`,
      ]);
      expect(metrics.value('oncely_compensations_total', ['flow', flowName, 'succeeded'])).toBe(3);
      expect(metrics.value('oncely_compensations_total', ['flow', flowName, 'failed'])).toBe(0);
      expect(metrics.value('oncely_flows_total', [flowName, 'failed'])).toBe(1);
      const shown = await flows.show(workflowId);
      expect(shown?.status).toBe('failed');
      expect(shown?.error?.message).toContain('no courier');
      const compensations = shown?.steps.filter((s) => s.stepId.startsWith('compensate:'));
      expect(compensations?.map((s) => [s.stepId, s.status, s.attempts])).toEqual([
        ['compensate:book', 'completed', 1],
        ['compensate:charge', 'completed', 1],
        ['compensate:reserve', 'completed', 1],
      ]);
      // Each recorded after the one before it: the reverse order is in the records too.
      const times = compensations?.map((s) => s.completedAt ?? 0) ?? [];
      expect([...times].sort((a, b) => a - b)).toEqual(times);
    });

    it('a compensation that fails is counted as failed, and the flow is still failed', async () => {
      const flowName = `saga-bad-${uid()}`;
      const log: string[] = [];
      const def = defineFlow<{ id: string }, unknown>(flowName, { seed: ['id'] }, async (run) => {
        await run.step('a', () => 1, { compensate: () => void log.push('undo a') });
        await run.step('b', () => 2, {
          compensate: () => {
            log.push('undo b');
            throw new Error('refund api down');
          },
        });
        await run.step('c', () => 3, { compensate: () => void log.push('undo c') });
        await run.step(
          'd',
          () => {
            throw new Declined('final');
          },
          { retry: { final: () => true } },
        );
      });
      const metrics = new Metrics();
      const flows = await flowsOf([def], { metrics });
      const { workflowId } = await flows.start(def, { id: 'B1' });
      expect((await failure(flows.result(workflowId, { timeout: '10s' }))).code).toBe('FLOW_FAILED');
      // The failing compensation is retried by the default policy (3 tries), then the next one runs.
      expect(log).toEqual(['undo c', 'undo b', 'undo b', 'undo b', 'undo a']);
      expect(metrics.value('oncely_flows_total', [flowName, 'failed'])).toBe(1);
      expect(metrics.value('oncely_compensations_total', ['flow', flowName, 'succeeded'])).toBe(2);
      expect(metrics.value('oncely_compensations_total', ['flow', flowName, 'failed'])).toBe(1);
      const shown = await flows.show(workflowId);
      expect(shown?.status).toBe('failed');
      expect(shown?.error?.message).toContain('step d failed');
      expect(shown?.steps.find((s) => s.stepId === 'compensate:b')).toMatchObject({
        status: 'failed',
        attempts: 3,
        error: expect.objectContaining({ message: 'refund api down' }),
      });
    });

    it('run.all runs steps in parallel and joins them; a step after it starts once both are done', async () => {
      const flowName = `par-${uid()}`;
      const spans: Record<string, [number, number]> = {};
      const timed = (id: string, ms: number) => async () => {
        const start = Date.now();
        // sleep: the steps take this long, so their overlap can be measured.
        await sleep(ms);
        spans[id] = [start, Date.now()];
        return id;
      };
      const def = defineFlow<{ id: string }, unknown>(flowName, { seed: ['id'] }, async (run) => {
        const t0 = Date.now();
        const joined = await run.all([
          () => run.step('left', timed('left', 200)),
          () => run.step('right', timed('right', 200)),
        ]);
        const elapsed = Date.now() - t0;
        const last = await run.step('merge', timed('merge', 0));
        return { joined, last, elapsed };
      });
      const flows = await flowsOf([def]);
      const { workflowId } = await flows.start(def, { id: 'P1' });
      const out = (await flows.result(workflowId, { timeout: '10s' })) as { joined: string[]; elapsed: number };
      expect(out.joined).toEqual(['left', 'right']);
      expect(out.elapsed).toBeGreaterThanOrEqual(195);
      expect(out.elapsed).toBeLessThan(350);
      const [left, right, merge] = [spans.left, spans.right, spans.merge];
      if (!left || !right || !merge) throw new Error('a step did not run');
      // Overlap: each started before the other ended.
      expect(left[0]).toBeLessThan(right[1]);
      expect(right[0]).toBeLessThan(left[1]);
      expect(merge[0]).toBeGreaterThanOrEqual(Math.max(left[1], right[1]));
      const shown = await flows.show(workflowId);
      expect(shown?.steps.map((s) => s.stepId).sort()).toEqual(['left', 'merge', 'right']);
    });

    it('run.all: when one parallel step fails for good, the others finish first and are compensated too', async () => {
      const flowName = `par-fail-${uid()}`;
      const log: string[] = [];
      const def = defineFlow<{ id: string }, unknown>(flowName, { seed: ['id'] }, async (run) => {
        await run.step('first', () => 'F', { compensate: () => void log.push('undo first') });
        await run.all([
          () =>
            run.step(
              'quick-fail',
              () => {
                throw new Declined('declined');
              },
              { retry: { final: () => true } },
            ),
          () =>
            run.step(
              'slow',
              async () => {
                // sleep: the slow step ends after its sibling failed.
                await sleep(100);
                log.push('slow done');
                return 'S';
              },
              { compensate: () => void log.push('undo slow') },
            ),
        ]);
      });
      const metrics = new Metrics();
      const flows = await flowsOf([def], { metrics });
      const { workflowId } = await flows.start(def, { id: 'PF1' });
      expect((await failure(flows.result(workflowId, { timeout: '10s' }))).code).toBe('FLOW_FAILED');
      await until(
        'the two compensations run',
        () => log.length,
        (n) => n >= 3,
      );
      // The slow step's effect happened, so it is undone, before the steps that came before it.
      expect(log).toEqual(['slow done', 'undo slow', 'undo first']);
      expect(metrics.value('oncely_compensations_total', ['flow', flowName, 'succeeded'])).toBe(2);
    });

    it('run.all of two waits: a timeout of one wakes the flow even while the other has none', async () => {
      const flowName = `par-wait-${uid()}`;
      let reminded = 0;
      const def = defineFlow<{ id: string }, unknown>(flowName, { seed: ['id'] }, async (run) =>
        run.all([
          () => run.waitFor<string>('approval'),
          async () => {
            const nudge = await run.waitFor('nudge', { timeout: '200ms' });
            if (nudge === null) await run.step('remind', () => void reminded++);
            return nudge;
          },
        ]),
      );
      const flows = await flowsOf([def]);
      const { workflowId } = await flows.start(def, { id: 'PW1' });
      // The reminder goes out once the nudge's timeout passes, while the approval is still awaited.
      await until('the reminder sent', () => reminded === 1, undefined, { timeoutMs: 3_000 });
      await until(
        'the flow waiting',
        async () => (await flows.get(workflowId))?.status,
        (status) => status === 'waiting',
      );
      await flows.signal(workflowId, 'approval', 'yes', { signalId: 'ok-1' });
      expect(await flows.result(workflowId, { timeout: '10s' })).toEqual(['yes', null]);
      expect(reminded).toBe(1);
    });

    it('flows.start with { tx } commits with the caller writes, and a rollback leaves no flow', async () => {
      const flowName = `tx-${uid()}`;
      const table = `app_orders_${uid()}`;
      await db.run(`CREATE TABLE ${table} (id TEXT PRIMARY KEY)`);
      const def = defineFlow<{ order: string }, string>(flowName, { seed: ['order'] }, async (run, input) =>
        run.step('confirm', () => `confirmed ${input.order}`),
      );
      const flows = await flowsOf([def]);
      const started = await db.transaction(async (tx) => {
        await tx.run(`INSERT INTO ${table} (id) VALUES (?)`, ['O-1']);
        return flows.start(def, { order: 'O-1' }, { tx });
      });
      expect(started).toEqual({ workflowId: `${flowName}-O-1`, already: false });
      expect(await flows.result(started.workflowId, { timeout: '10s' })).toBe('confirmed O-1');

      const failed = await db
        .transaction(async (tx) => {
          await tx.run(`INSERT INTO ${table} (id) VALUES (?)`, ['O-2']);
          await flows.start(def, { order: 'O-2' }, { tx });
          throw new Error('handler failed after starting the flow');
        })
        .catch((e) => e);
      expect(failed.message).toContain('handler failed');
      // sleep: a window in which a worker would run a start that was rolled back.
      await sleep(100);
      expect(await flows.get(`${flowName}-O-2`)).toBeNull();
      expect(await db.all(`SELECT id FROM ${table} ORDER BY id`)).toEqual([{ id: 'O-1' }]);
      // The rolled back start never happened: starting it now is a first start.
      expect(await flows.start(def, { order: 'O-2' })).toEqual({ workflowId: `${flowName}-O-2`, already: false });
      expect(await flows.result(`${flowName}-O-2`, { timeout: '10s' })).toBe('confirmed O-2');
    });
  });
}

const schema = freshSchema();
for (const { name, open } of selectStores([
  {
    name: 'sqlite',
    open: async () => ({
      target: join(mkdtempSync(join(tmpdir(), 'oncely-flows-')), 'flows.db'),
      cleanup: async () => {},
    }),
  },
  {
    name: 'postgres',
    open: async () => ({ target: `${POSTGRES_URL}?schema=${schema}`, cleanup: () => dropSchema(schema) }),
  },
] as const))
  describeFlows(name, open);
