/**
 * The app of the external-effects tests: `pay.charge` (a handler) and `shop/order.paid` (a
 * consumer), both with effects 'external', charge a real gateway (test/engine/support/downstream.ts)
 * under ctx.idempotencyKey, then write the payment row with ctx.store. `crashAt` makes them print
 * a line and hang at one window, for the test to kill -9 the process there: 'before-charge'
 * (claimed, nothing charged) or 'after-charge' (charged, not committed).
 */
import type { LeaseExpiredPolicy } from '../../../src/core/record.js';
import type { HostContext } from '../../../src/host/context.js';
import { charge, reconcileCharge } from '../../engine/support/downstream.js';
import type { TestApp } from '../../support/host-app.js';

/** How one host of the test app behaves. */
export interface PayOptions {
  gateway: string;
  lease: number;
  onLeaseExpired: LeaseExpiredPolicy;
  crashAt?: 'before-charge' | 'after-charge';
  /** How long the handler lingers after the charge, so concurrent duplicates overlap it. */
  holdMs?: number;
}

export const PAY_SCHEMA = 'CREATE TABLE payments (order_id TEXT PRIMARY KEY, charge_id TEXT NOT NULL);';

const hang = () => new Promise<never>(() => {});

/** The app: one external handler and one external consumer, their reconcile asking the gateway by the key. */
export function payApp(options: PayOptions): TestApp {
  const claim = {
    effects: 'external' as const,
    lease: options.lease,
    onLeaseExpired: options.onLeaseExpired,
    reconcile: reconcileCharge(options.gateway),
  };
  return {
    schemaSql: PAY_SCHEMA,
    // Short leases and backoff, many attempts: a killed worker's event is soon claimed again, never dead-lettered here.
    config: { events: { lease: options.lease, backoff: 50, maxAttempts: 1000 } },
    handlers: {
      'pay.charge': {
        ...claim,
        handle(input: unknown, ctx: HostContext) {
          const { orderId, amount } = input as { orderId: string; amount: number };
          return pay(options, ctx, orderId, amount);
        },
      },
    },
    consumers: {
      'shop/order.paid': {
        ...claim,
        async handle(event, ctx) {
          const { orderId, amount } = event.data as { orderId: string; amount: number };
          await pay(options, ctx, orderId, amount);
        },
      },
    },
  };
}

/** Charges under ctx.idempotencyKey and writes the payment row, stopping at the window asked for. */
async function pay(options: PayOptions, ctx: HostContext, orderId: string, amount: number) {
  if (options.crashAt === 'before-charge') {
    console.log('claimed');
    await hang();
  }
  const made = await charge(options.gateway, ctx.idempotencyKey as string, amount);
  if (options.crashAt === 'after-charge') {
    console.log('charged');
    await hang();
  }
  // sleep: holds the transaction open, so concurrent duplicates overlap it.
  if (options.holdMs) await new Promise((resolve) => setTimeout(resolve, options.holdMs));
  const row = await ctx.store.createIfAbsent('payments', { order_id: orderId, charge_id: made.chargeId }, ['order_id']);
  if (!row.ok) throw new Error(row.error.message);
  return made;
}
