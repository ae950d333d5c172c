import { afterEach, describe, expect, it } from 'vitest';
import type { Db } from '../../src/db/types.js';
import { type Claim, WorkQueue } from '../../src/work/index.js';
import { startWorker, type Worker } from '../support/spawn.js';
import { until } from '../support/wait.js';
import { CLAIMER, DIALECTS, due, ITEMS, seed, type Target, targets } from './support/targets.js';

// sleep: the helper for the waits below whose duration is the point (a lease running out, a window).
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

for (const dialect of DIALECTS) {
  describe(`claimed work on ${dialect}`, () => {
    let target: Target;
    const opened: Db[] = [];
    const workers: Worker[] = [];
    const open = async () => {
      const db = await target.open();
      opened.push(db);
      return db;
    };
    const spawn = (job: object) => {
      const worker = startWorker({ url: target.url, ...job }, CLAIMER);
      workers.push(worker);
      return worker;
    };

    afterEach(async () => {
      for (const w of workers.splice(0)) {
        if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGKILL');
        await w.exited;
      }
      for (const db of opened.splice(0)) await db.close();
      await target?.dispose();
    });

    it('shares 600 rows between 3 processes without one claimed twice', async () => {
      target = targets[dialect]();
      const db = await open();
      const ids = await seed(db, 600);
      const startAt = Date.now() + 2_500;
      const children = ['a', 'b', 'c'].map((name) =>
        spawn({ name, mode: 'drain', leaseMs: 30_000, batch: 8, startAt }),
      );
      const lines: Record<string, string[]> = {};
      for (const [i, child] of children.entries()) {
        const seen: string[] = [];
        lines[i] = seen;
        child.child.stdout.on('data', (chunk: Buffer) => seen.push(...chunk.toString().split('\n').filter(Boolean)));
      }
      for (const child of children) expect(await child.exited).toEqual({ code: 0, signal: null });
      const claimedBy = Object.values(lines).map((seen) =>
        seen.filter((l) => l.startsWith('{')).flatMap((l) => (JSON.parse(l) as { claimed: string[] }).claimed),
      );
      const all = claimedBy.flat();
      expect(all.length).toBe(600);
      expect(new Set(all).size).toBe(600);
      expect([...all].sort()).toEqual(ids);
      // Each process did part of the work: the claims really ran side by side.
      for (const mine of claimedBy) expect(mine.length).toBeGreaterThan(0);
      const rows = await db.all<{ status: string; attempts: number; fence: number | string }>(
        'SELECT status, attempts, fence FROM work_items',
      );
      expect(rows.every((r) => r.status === 'done' && Number(r.attempts) === 1 && Number(r.fence) === 1)).toBe(true);
    }, 60_000);

    it('keeps a live holder’s rows by renewal, and claims a kill -9’d holder’s rows again after the lease', async () => {
      target = targets[dialect]();
      const db = await open();
      await seed(db, 5);
      const holder = spawn({ name: 'holder', mode: 'hold', leaseMs: 600, batch: 3 });
      const held = (JSON.parse(await holder.waitFor('{')) as { claimed: string[] }).claimed;
      expect(held.sort()).toEqual(['item-000', 'item-001', 'item-002']);
      const work = new WorkQueue<{ id: string }>(db, ITEMS, { leaseMs: 30_000 });
      // Two leases later the holder is alive and renewing: its rows are not due.
      // sleep: two leases must pass for the renewals to be what keeps the rows.
      await sleep(1_300);
      const others = await work.claim(10, due());
      expect(others.map((c) => c.row.id).sort()).toEqual(['item-003', 'item-004']);
      holder.child.kill('SIGKILL');
      await holder.exited;
      expect(await work.claim(10, due())).toEqual([]);
      // sleep: the dead holder's 600 ms lease must run out.
      await sleep(700);
      const again = await work.claim(10, due());
      expect(again.map((c) => c.row.id).sort()).toEqual(held);
      // The second claim of each: attempt 2 under a new fence.
      for (const claim of again) expect([claim.attempts, claim.fence]).toEqual([2, 2]);
      for (const claim of again) expect(await work.complete(db, claim, 'done')).toBe(true);
    }, 30_000);

    it('refuses every write of a late holder once another worker claimed its row', async () => {
      target = targets[dialect]();
      const db = await open();
      const other = await open();
      await seed(db, 1);
      const late = new WorkQueue<{ id: string }>(db, ITEMS, { leaseMs: 30_000, maxAttempts: 3 });
      const [mine] = await late.claim(1, due());
      if (!mine) throw new Error('no claim');
      // The holder stalled: its lease ran out, and a worker on another connection took the row.
      await db.run("UPDATE work_items SET lease_until = 0 WHERE id = 'item-000'");
      const next = new WorkQueue<{ id: string }>(other, ITEMS, { leaseMs: 30_000 });
      const [theirs] = await next.claim(1, due());
      expect(theirs).toMatchObject({ attempts: 2, fence: 2 });
      if (!theirs) throw new Error('no claim');

      expect(await late.complete(db, mine, 'done', { done_by: 'late' })).toBe(false);
      expect(await late.fail(db, mine, late.plan(mine), 'late failure')).toBe(false);
      expect(await late.release(db, mine)).toBe(false);
      expect(await db.transaction((tx) => late.hold(tx, mine))).toBe(false);
      expect(await db.all('SELECT status, done_by, last_error FROM work_items')).toEqual([
        { status: 'running', done_by: null, last_error: null },
      ]);
      // A renewal finds the row claimed again: the late holder learns it lost the claim.
      const kept = new WorkQueue<{ id: string }>(db, ITEMS, { leaseMs: 30 }).keep(mine);
      await until('the renewal to find the row claimed again', () => !kept.holds());
      expect(kept.holds()).toBe(false);
      kept.stop();

      expect(await next.complete(other, theirs, 'done', { done_by: 'next' })).toBe(true);
      expect(await db.all('SELECT status, done_by FROM work_items')).toEqual([{ status: 'done', done_by: 'next' }]);
    });

    it('claims one row by its key: when ready, not while held, again once the lease ran out', async () => {
      target = targets[dialect]();
      const db = await open();
      await seed(db, 2);
      const work = new WorkQueue<{ id: string }>(db, ITEMS, { leaseMs: 50 });
      const ready = due().ready;
      const first = await work.claimRow(['item-001'], ready);
      expect(first).toMatchObject({ key: ['item-001'], attempts: 1, fence: 1 });
      expect(await work.claimRow(['item-001'], ready)).toBeNull();
      const again = await until('the 50 ms lease to run out and the row to be claimed again', () =>
        work.claimRow(['item-001'], ready),
      );
      expect(again).toMatchObject({ attempts: 2, fence: 2 });
      expect(await db.all("SELECT id FROM work_items WHERE status = 'pending'")).toEqual([{ id: 'item-000' }]);
    });

    it('fails with backoff, dead-letters after maxAttempts, and gives back a released claim uncounted', async () => {
      target = targets[dialect]();
      const db = await open();
      await seed(db, 2);
      const work = new WorkQueue<{ id: string }>(db, ITEMS, {
        leaseMs: 30_000,
        maxAttempts: 2,
        baseDelayMs: 1,
        maxDelayMs: 1,
      });
      const byId = (claims: Claim<{ id: string }>[]) => claims.sort((a, b) => (a.row.id < b.row.id ? -1 : 1));
      const [first, second] = byId(await work.claim(2, due()));
      if (!first || !second) throw new Error('no claims');
      expect(await work.release(db, second)).toBe(true);
      const plan = work.plan(first);
      expect(plan.dead).toBe(false);
      expect(await work.fail(db, first, plan, 'boom')).toBe(true);
      // sleep: the 1 ms backoff must pass for the failed row to be due again.
      await sleep(5);
      const retried = byId(await work.claim(2, due()));
      expect(retried.map((c) => [c.row.id, c.attempts])).toEqual([
        ['item-000', 2],
        ['item-001', 1],
      ]);
      const [again] = retried;
      if (!again) throw new Error('no claim');
      const last = work.plan(again);
      expect(last.dead).toBe(true);
      expect(await work.fail(db, again, last, 'boom again')).toBe(true);
      expect(await db.all("SELECT id, status, last_error FROM work_items WHERE id = 'item-000'")).toEqual([
        { id: 'item-000', status: 'dead', last_error: 'boom again' },
      ]);
    });
  });
}
