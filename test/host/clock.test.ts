/**
 * A host given a manual clock judges its event queue's and outbox relay's times by it: a failed
 * consumer's retry comes due, and a relay's lease runs out, only when the test advances the clock
 * (and then at once, without waiting the 30 s of real time). The statements take the time as a
 * value, so this holds on PostgreSQL as on SQLite. The clock starts on a fixed day in the past:
 * a time taken from the system clock anywhere on the way would be months from due.
 */
import { tmpdir } from 'node:os';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { openDb } from '../../src/db/index.js';
import type { Db } from '../../src/db/types.js';
import type { App, ConsumerModule, HandlerModule } from '../../src/host/app.js';
import type { HostConfig } from '../../src/host/config.js';
import { createHost, type Host } from '../../src/host/host.js';
import { OutboxRelay } from '../../src/host/outbox.js';
import { recordStoreFor } from '../../src/host/records.js';
import { type ManualClock, manualClock } from '../../src/testing/index.js';
import { hostTargets } from '../support/host-app.js';

const DAY = Date.UTC(2026, 0, 1);

/** A host of an app built here, migrated but not started: the test runs its queue and relay by hand. */
async function hostOf(
  target: string,
  clock: ManualClock,
  app: { config?: HostConfig; handlers?: Record<string, HandlerModule>; consumers?: Record<string, ConsumerModule> },
): Promise<{ host: Host; db: Db; close(): Promise<void> }> {
  const db = await openDb(target, { poolSize: 4 });
  const loaded: App = {
    dir: tmpdir(),
    config: app.config ?? {},
    schemaSql: '',
    handlers: new Map(Object.entries(app.handlers ?? {})),
    consumers: new Map(Object.entries(app.consumers ?? {})),
    flows: [],
  };
  const host = await createHost(loaded, db, recordStoreFor(db), { clock });
  await host.migrate();
  return {
    host,
    db,
    // The host's stop closes its database.
    close: () => host.stop(),
  };
}

describe.each(hostTargets())('host on $name with a manual clock', ({ target, cleanup }) => {
  afterAll(cleanup);
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it("a failed consumer's retry comes due when the clock passes its backoff, not before", async () => {
    // Full jitter draws half the ceiling: the retry is due 30 s after the failure, by the clock.
    vi.spyOn(Math, 'random').mockReturnValue(0.5);
    const clock = manualClock(DAY);
    let calls = 0;
    const flaky: ConsumerModule = {
      handle() {
        calls++;
        if (calls === 1) throw new Error('the mailer is down');
      },
    };
    const { host, close } = await hostOf(target(), clock, {
      config: { events: { backoff: '1m' } },
      consumers: { 'shop/order.paid': flaky },
    });
    try {
      expect(await host.events.intake('shop', 'evt-1', 'order.paid', { orderId: 'ORD-1' })).toBe('accepted');
      expect((await host.events.get('shop', 'evt-1'))?.receivedAt).toBe(DAY);
      // The first attempt fails; its retry is 30 s away by the clock, which does not move by itself.
      await expect(host.events.drain(300)).rejects.toMatchObject({ code: 'DRAIN_TIMEOUT' });
      expect(calls).toBe(1);
      expect(await host.events.get('shop', 'evt-1')).toMatchObject({
        status: 'pending',
        attempts: 1,
        nextAttemptAt: DAY + 30_000,
      });
      clock.advance('29s');
      await expect(host.events.drain(300)).rejects.toMatchObject({ code: 'DRAIN_TIMEOUT' });
      expect(calls).toBe(1);
      clock.advance('1s');
      const started = Date.now();
      await host.events.drain(5_000);
      expect(Date.now() - started).toBeLessThan(5_000);
      expect(calls).toBe(2);
      expect(await host.events.get('shop', 'evt-1')).toMatchObject({ status: 'applied', attempts: 2 });
    } finally {
      await close();
    }
  });

  it("an outbox row's lease runs out by the clock: another relay takes it over, the stalled one changes nothing", async () => {
    const clock = manualClock(DAY);
    const shipped: string[] = [];
    const ship: HandlerModule = {
      async handle(input, ctx) {
        const { orderId } = input as { orderId: string };
        return ctx.outbox.enqueue('order.shipped', { orderId });
      },
    };
    const consumer: ConsumerModule = {
      handle(event) {
        shipped.push((event.data as { orderId: string }).orderId);
      },
    };
    const { host, db, close } = await hostOf(target(), clock, {
      handlers: { 'orders.ship': ship },
      consumers: { 'outbox/order.shipped': consumer },
    });
    // A relay that claims the row and stalls mid-delivery, as one whose process hung or died would.
    let stalled = false;
    let resume: () => void = () => undefined;
    const stuck = new OutboxRelay(db, {
      lease: '30s',
      clock,
      target: {
        deliver: () =>
          new Promise<void>((resolve) => {
            stalled = true;
            resume = resolve;
          }),
      },
    });
    try {
      const res = await host.http.request('/v1/invoke/orders.ship', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': '"ship-1"' },
        body: JSON.stringify({ orderId: 'ORD-1' }),
      });
      expect(res.status).toBe(200);
      const rows = () =>
        db.all<{ status: string; attempts: number | string; created_at: number | string }>(
          'SELECT status, attempts, created_at FROM oncely_outbox',
        );
      // Written at the clock's time: due now by it.
      expect((await rows()).map((r) => Number(r.created_at))).toEqual([DAY]);
      const round = stuck.deliverDue();
      await vi.waitFor(() => expect(stalled).toBe(true));
      expect((await rows())[0]?.status).toBe('delivering');
      // The host's relay: nothing to claim while the lease holds by the clock.
      expect(await host.relay.deliverDue()).toBe(0);
      clock.advance('29s');
      expect(await host.relay.deliverDue()).toBe(0);
      clock.advance('1s');
      expect(await host.relay.deliverDue()).toBe(1);
      await host.events.drain(5_000);
      expect(shipped).toEqual(['ORD-1']);
      expect(await rows()).toMatchObject([{ status: 'delivered' }]);
      expect(Number((await rows())[0]?.attempts)).toBe(2);
      // The stalled relay finishes at last: its completion is fenced off, the row stays as the other left it.
      resume();
      expect(await round).toBe(1);
      expect(await rows()).toMatchObject([{ status: 'delivered' }]);
      expect(Number((await rows())[0]?.attempts)).toBe(2);
      expect(shipped).toEqual(['ORD-1']);
    } finally {
      resume();
      await close();
    }
  });
});
