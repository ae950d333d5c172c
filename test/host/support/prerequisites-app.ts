/**
 * The shop of the prerequisite tests: orders, their payments and refunds, notes that wait for a
 * gate, each consumer ordered by the order id and the event's version. Used in the test process
 * and in a child process the tests kill.
 */
import type { Duration } from '../../../src/core/duration.js';
import type { ConsumerModule } from '../../../src/host/app.js';
import type { HostEvent } from '../../../src/host/types.js';
import type { TestApp } from '../../support/host-app.js';

/** Test switches of the shop. */
export interface ShopOptions {
  /** The payment's prerequisite check prints "checking" and never answers (a process to kill mid-check). */
  hangInRequires?: boolean;
  /** The event lease of this host's claims. */
  leaseMs?: number;
}

const SCHEMA = `CREATE TABLE orders (id TEXT PRIMARY KEY, paid INTEGER NOT NULL, refunded INTEGER NOT NULL);
CREATE TABLE steps (id TEXT PRIMARY KEY, order_id TEXT NOT NULL, kind TEXT NOT NULL, seq INTEGER NOT NULL);
CREATE TABLE gates (id TEXT PRIMARY KEY);`;

// Every consumer orders by the order id and the event's version: what one waits for wakes it when it applies.
const ordering = {
  aggregate: (e: HostEvent) => (e.data as { orderId: string }).orderId,
  version: (e: HostEvent) => (e.data as { version: number }).version,
};

/** The shop's consumers; `runs` counts each consumer's executions by event id (prerequisite checks are not runs). */
export function shop(requiresWithin: Duration, runs: Map<string, number>, options: ShopOptions = {}): TestApp {
  const step = async (e: HostEvent, ctx: Parameters<ConsumerModule['handle']>[1], kind: string) => {
    runs.set(e.id, (runs.get(e.id) ?? 0) + 1);
    const { orderId } = e.data as { orderId: string };
    const before = await ctx.store.find('steps', { orderId });
    if (!before.ok) throw new Error(before.error.message);
    const made = await ctx.store.createIfAbsent('steps', { id: e.id, orderId, kind, seq: before.data.length + 1 }, [
      'id',
    ]);
    if (!made.ok) throw new Error(made.error.message);
  };
  const consumers: Record<string, ConsumerModule> = {
    'shop/order.created': {
      ordering,
      async handle(e, ctx) {
        await ctx.store.createIfAbsent(
          'orders',
          { id: (e.data as { orderId: string }).orderId, paid: 0, refunded: 0 },
          ['id'],
        );
        await step(e, ctx, 'order');
      },
    },
    'shop/payment.applied': {
      ordering,
      requiresWithin,
      async requires(e, ctx) {
        if (options.hangInRequires) {
          console.log('checking');
          await new Promise(() => {});
        }
        const found = await ctx.store.get('orders', { id: (e.data as { orderId: string }).orderId });
        return found.ok && found.data !== null;
      },
      async handle(e, ctx) {
        await ctx.store.update('orders', { id: (e.data as { orderId: string }).orderId }, { paid: 1 });
        await step(e, ctx, 'payment');
      },
    },
    'shop/refund.applied': {
      ordering,
      requiresWithin,
      async requires(e, ctx) {
        const found = await ctx.store.get('orders', { id: (e.data as { orderId: string }).orderId, paid: 1 });
        return found.ok && found.data !== null;
      },
      async handle(e, ctx) {
        await ctx.store.update('orders', { id: (e.data as { orderId: string }).orderId }, { refunded: 1 });
        await step(e, ctx, 'refund');
      },
    },
    // A note waits for the gate it names, if any: one that names none is ready at once.
    'shop/order.noted': {
      ordering,
      requiresWithin,
      async requires(e, ctx) {
        const { gate } = e.data as { gate?: string };
        if (gate === undefined) return true;
        const found = await ctx.store.get('gates', { id: gate });
        return found.ok && found.data !== null;
      },
      handle: (e, ctx) => step(e, ctx, 'note'),
    },
    'shop/gate.opened': {
      ordering,
      async handle(e, ctx) {
        await ctx.store.createIfAbsent('gates', { id: (e.data as { gate: string }).gate }, ['id']);
        await step(e, ctx, 'gate');
      },
    },
  };
  return {
    schemaSql: SCHEMA,
    consumers,
    config: {
      events: { backoff: 20, maxAttempts: 2, ...(options.leaseMs ? { lease: options.leaseMs } : {}) },
      retention: { events: '1ms', every: '1h' },
    },
  };
}
