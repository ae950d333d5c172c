import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { openDb } from '../../src/db/index.js';
import { loadApp } from '../../src/host/app.js';
import * as q from '../../src/host/event-sql.js';
import { EventQueue, type StoredEvent } from '../../src/host/events.js';
import { hostTargets, type RunningHost, startHost } from '../support/host-app.js';
import { startWorker } from '../support/spawn.js';
import { until } from '../support/wait.js';
import { shop } from './support/prerequisites-app.js';

const event = (h: RunningHost, id: string) => h.host.events.get('shop', id) as Promise<StoredEvent>;
const status = (h: RunningHost, id: string) =>
  until(
    `${id} settled`,
    () => event(h, id),
    (e) => e !== null && e.status !== 'pending' && e.status !== 'processing' && e.status !== 'waiting',
  );
const steps = (h: RunningHost, orderId: string) =>
  h.rows<{ id: string; kind: string; seq: number | string }>(
    'SELECT id, kind, seq FROM steps WHERE order_id = ? ORDER BY seq',
    [orderId],
  );

const CHILD = fileURLToPath(new URL('./support/prerequisites-child.ts', import.meta.url));
const ADMIN_TOKEN = 'prerequisites-test-token-0123456789';

const cleanups: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups) await cleanup();
});

for (const { name } of hostTargets())
  describe(`consumer prerequisites on ${name}`, () => {
    // A database of its own per test (totals are summed over the whole database): a new hostTargets() each.
    const fresh = () => {
      const target = hostTargets().find((t) => t.name === name);
      if (!target) throw new Error(name);
      cleanups.push(target.cleanup);
      return target.target();
    };

    it('applies a refund, payment and order that arrive in reverse order once each, in order', async () => {
      const runs = new Map<string, number>();
      const h = await startHost(fresh(), shop('1m', runs));
      try {
        const intake = (id: string, type: string, version: number) =>
          h.host.events.intake('shop', id, type, { orderId: 'ORD-1', version });
        await intake('refund-1', 'refund.applied', 3);
        await until(
          'refund waits',
          () => event(h, 'refund-1'),
          (e) => e.status === 'waiting',
        );
        await intake('payment-1', 'payment.applied', 2);
        await until(
          'payment waits',
          () => event(h, 'payment-1'),
          (e) => e.status === 'waiting',
        );
        // Neither ran: a check that finds the prerequisite unmet is no execution.
        expect(runs.size).toBe(0);
        // Read between checks: while one runs, the event is processing.
        const refund = await until(
          'refund checked again',
          () => event(h, 'refund-1'),
          (e) => e.status === 'waiting' && e.waits >= 2,
        );
        expect(refund.attempts).toBe(0);
        expect(refund.lastError).toMatch(/^waiting: /);
        await intake('order-1', 'order.created', 1);
        for (const id of ['order-1', 'payment-1', 'refund-1'])
          expect(await status(h, id)).toMatchObject({ status: 'applied', attempts: 1, lastError: null });
        expect((await steps(h, 'ORD-1')).map((s) => [s.id, s.kind, Number(s.seq)])).toEqual([
          ['order-1', 'order', 1],
          ['payment-1', 'payment', 2],
          ['refund-1', 'refund', 3],
        ]);
        expect(Object.fromEntries(runs)).toEqual({ 'order-1': 1, 'payment-1': 1, 'refund-1': 1 });
        expect(await h.rows('SELECT paid, refunded FROM orders WHERE id = ?', ['ORD-1'])).toEqual([
          { paid: 1, refunded: 1 },
        ]);
        // Every check that found it unmet was counted deferred, nothing else was.
        const [sum] = await h.rows<{ waits: number | string }>('SELECT SUM(waits) AS waits FROM oncely_events');
        const stats = await h.host.events.stats();
        expect(stats.deferred).toBe(Number(sum?.waits));
        expect(stats.deferred).toBeGreaterThanOrEqual(4);
        expect(stats).toMatchObject({ applied: 3, stale: 0, retrying: 0, dead_lettered: 0 });
      } finally {
        await h.stop();
      }
    });

    it('keeps a later version of an aggregate waiting behind an earlier one that waits, instead of applying it first', async () => {
      const runs = new Map<string, number>();
      const h = await startHost(fresh(), shop('1m', runs));
      try {
        const note = (id: string, version: number, gate?: string) =>
          h.host.events.intake('shop', id, 'order.noted', { orderId: 'ORD-2', version, ...(gate ? { gate } : {}) });
        await note('note-1', 1, 'g-1');
        await until(
          'note 1 waits',
          () => event(h, 'note-1'),
          (e) => e.status === 'waiting',
        );
        // Its own prerequisite holds, but version 1 of its aggregate waits: so does it.
        await note('note-2', 2);
        const behind = await until(
          'note 2 waits',
          () => event(h, 'note-2'),
          (e) => e.status === 'waiting',
        );
        expect(behind.lastError).toMatch(/behind version 1 of aggregate ORD-2/);
        expect(runs.size).toBe(0);
        // The gate is an event of another aggregate: it opens note 1's prerequisite.
        await h.host.events.intake('shop', 'gate-1', 'gate.opened', { orderId: 'GATE', version: 1, gate: 'g-1' });
        expect(await status(h, 'note-1')).toMatchObject({ status: 'applied' });
        expect(await status(h, 'note-2')).toMatchObject({ status: 'applied' });
        expect((await steps(h, 'ORD-2')).map((s) => s.id)).toEqual(['note-1', 'note-2']);
        expect((await h.host.events.stats()).stale).toBe(0);
      } finally {
        await h.stop();
      }
    });

    it('dead-letters an event whose prerequisite never arrives after requiresWithin, saying so, with no attempt used', async () => {
      const runs = new Map<string, number>();
      const h = await startHost(fresh(), shop('1500ms', runs));
      try {
        const started = Date.now();
        await h.host.events.intake('shop', 'payment-9', 'payment.applied', { orderId: 'ORD-9', version: 2 });
        // More checks than maxAttempts (2): waits are not attempts.
        const waiting = await until(
          'payment waits',
          () => event(h, 'payment-9'),
          (e) => e.status === 'waiting' && e.waits >= 3,
        );
        expect(waiting).toMatchObject({ status: 'waiting', attempts: 0 });
        // Retention never takes a waiting event, however old its retention says it is.
        await h.host.purge();
        expect(await event(h, 'payment-9')).not.toBeNull();
        const dead = await status(h, 'payment-9');
        expect(Date.now() - started).toBeGreaterThanOrEqual(1_500);
        expect(dead.updatedAt - dead.receivedAt).toBeGreaterThanOrEqual(1_500);
        expect(dead).toMatchObject({ status: 'dead', attempts: 0 });
        expect(dead.lastError).toMatch(/^prerequisite not met within requiresWithin; dead-lettered after \d+ check/);
        expect(runs.size).toBe(0);
        const letters = await h.host.events.deadLetters();
        expect(letters.map((l) => l.id)).toEqual(['shop/payment-9']);
        const stats = await h.host.events.stats();
        expect(stats).toMatchObject({ dead_lettered: 1, applied: 0, retrying: 0 });
        expect(stats.deferred).toBeGreaterThanOrEqual(3);
        // Replayed once the order exists, it gets a new window and applies.
        await h.host.events.intake('shop', 'order-9', 'order.created', { orderId: 'ORD-9', version: 1 });
        expect(await status(h, 'order-9')).toMatchObject({ status: 'applied' });
        expect(await h.host.events.replay([{ source: 'shop', id: 'payment-9' }])).toBe(1);
        expect(await status(h, 'payment-9')).toMatchObject({ status: 'applied', attempts: 1 });
        expect(runs.get('payment-9')).toBe(1);
      } finally {
        await h.stop();
      }
    });

    it('keeps waiting events across a restart: a new host on the same database delivers them when the prerequisite arrives', async () => {
      const target = fresh();
      const runs = new Map<string, number>();
      const first = await startHost(target, shop('1m', runs));
      try {
        await first.host.events.intake('shop', 'payment-5', 'payment.applied', { orderId: 'ORD-5', version: 2 });
        await until(
          'payment waits',
          () => event(first, 'payment-5'),
          (e) => e.status === 'waiting',
        );
      } finally {
        await first.stop();
      }
      const second = await startHost(target, shop('1m', runs), { host: { adminToken: ADMIN_TOKEN } });
      try {
        // The new host checks it again (processing for a moment) and keeps it waiting.
        const kept = await until(
          'payment still waits',
          () => event(second, 'payment-5'),
          (e) => e.status === 'waiting',
        );
        expect(kept.attempts).toBe(0);
        // The admin API lists it by its status.
        const listWaiting = async () => {
          const listed = await fetch(`${second.base}/v1/admin/events?status=waiting`, {
            headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
          });
          expect(listed.status).toBe(200);
          return ((await listed.json()) as { data: { events: { eventId: string; status: string }[] } }).data.events;
        };
        // Between two checks (during one it is processing, then pending for a moment).
        const waiting = await until('listed waiting', listWaiting, (events) => events.length > 0);
        expect(waiting).toEqual([expect.objectContaining({ eventId: 'payment-5', status: 'waiting' })]);
        await second.host.events.intake('shop', 'order-5', 'order.created', { orderId: 'ORD-5', version: 1 });
        expect(await status(second, 'payment-5')).toMatchObject({ status: 'applied', attempts: 1 });
        expect((await steps(second, 'ORD-5')).map((s) => s.id)).toEqual(['order-5', 'payment-5']);
        expect(Object.fromEntries(runs)).toEqual({ 'order-5': 1, 'payment-5': 1 });
      } finally {
        await second.stop();
      }
    });

    it('gives an event whose host was killed -9 during its prerequisite check to another host after the lease, and applies it once', async () => {
      const target = fresh();
      const runs = new Map<string, number>();
      // The tables first, so the child and this process never migrate at once.
      await (await startHost(target, shop('1m', runs))).stop();
      const child = startWorker({ target, leaseMs: 500 }, CHILD);
      try {
        await child.waitFor('ready');
        const db = await openDb(target, { poolSize: 1 });
        try {
          await new EventQueue(db, { consumerFor: () => undefined }).intake('shop', 'payment-7', 'payment.applied', {
            orderId: 'ORD-7',
            version: 2,
          });
        } finally {
          await db.close();
        }
        await child.waitFor('checking');
      } finally {
        child.child.kill('SIGKILL');
        await child.exited;
      }
      const h = await startHost(target, shop('1m', runs, { leaseMs: 500 }));
      try {
        // Taken again once the dead host's lease ran out; the crash used an attempt, the checks none.
        const waiting = await until(
          'payment waits on the new host',
          () => event(h, 'payment-7'),
          (e) => e.status === 'waiting',
        );
        expect(waiting.attempts).toBe(1);
        await h.host.events.intake('shop', 'order-7', 'order.created', { orderId: 'ORD-7', version: 1 });
        expect(await status(h, 'payment-7')).toMatchObject({ status: 'applied', attempts: 2 });
        expect((await steps(h, 'ORD-7')).map((s) => s.id)).toEqual(['order-7', 'payment-7']);
        expect(Object.fromEntries(runs)).toEqual({ 'order-7': 1, 'payment-7': 1 });
      } finally {
        await h.stop();
      }
    }, 30_000);
  });

describe('consumer prerequisites: the statements a wait adds read their indexes', () => {
  for (const { name } of hostTargets())
    it(`on ${name}`, async () => {
      const target = hostTargets().find((t) => t.name === name);
      if (!target) throw new Error(name);
      cleanups.push(target.cleanup);
      const db = await openDb(target.target(), { poolSize: 2 });
      try {
        await new EventQueue(db, { consumerFor: () => undefined }).migrate();
        const plan = async (s: { text: string; values: unknown[] }) =>
          db.transaction(async (tx) => {
            // A fresh table is small enough for PostgreSQL to scan it: this asks whether the index can serve.
            if (tx.dialect === 'postgres') await tx.run('SET LOCAL enable_seqscan = off');
            const rows = await tx.all<Record<string, unknown>>(
              `${tx.dialect === 'sqlite' ? 'EXPLAIN QUERY PLAN' : 'EXPLAIN'} ${s.text}`,
              s.values,
            );
            return rows.map((r) => String(r.detail ?? r['QUERY PLAN'])).join('\n');
          });
        const now = Date.now();
        expect(await plan(q.dueWaits(db.dialect, now))).toMatch(/oncely_events_waiting_due/);
        expect(await plan(q.heldVersions('ORD-1', 1, 'shop', 'e-1'))).toMatch(/oncely_events_waiting\b/);
        expect(await plan(q.wakeLater('ORD-1', 1, now))).toMatch(/oncely_events_waiting\b/);
      } finally {
        await db.close();
      }
    });
});

describe('consumer prerequisites at load', () => {
  const app = (consumer: string) => {
    const dir = mkdtempSync(join(tmpdir(), 'oncely-requires-'));
    mkdirSync(join(dir, 'consumers', 'shop'), { recursive: true });
    writeFileSync(join(dir, 'consumers', 'shop', 'payment.applied.mjs'), consumer);
    return dir;
  };

  it('refuses a bad requiresWithin, one without requires, and a requires that is not a function', async () => {
    const handle = 'export const handle = () => {};';
    await expect(
      loadApp(app(`${handle} export const requires = () => true; export const requiresWithin = 'soon';`)),
    ).rejects.toMatchObject({ code: 'CONFIG_INVALID', message: expect.stringMatching(/requiresWithin/) });
    await expect(
      loadApp(app(`${handle} export const requires = () => true; export const requiresWithin = 0;`)),
    ).rejects.toMatchObject({ code: 'CONFIG_INVALID', message: expect.stringMatching(/longer than 0/) });
    await expect(loadApp(app(`${handle} export const requiresWithin = '1h';`))).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: expect.stringMatching(/needs a requires/),
    });
    await expect(loadApp(app(`${handle} export const requires = true;`))).rejects.toMatchObject({
      code: 'CONFIG_INVALID',
      message: expect.stringMatching(/requires must be a function/),
    });
    const loaded = await loadApp(
      app(`${handle} export const requires = () => true; export const requiresWithin = '10m';`),
    );
    expect(loaded.consumers.get('shop/payment.applied')?.requiresWithin).toBe('10m');
  });
});
