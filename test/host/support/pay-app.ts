/**
 * The app of the external-effects tests: `pay.charge` (effects 'external') charges a real gateway
 * (test/engine/support/downstream.ts) under ctx.idempotencyKey, then writes the payment row with
 * ctx.store. `crashAt` makes it print a line and hang at one window, for the test to kill -9 it
 * there: 'before-charge' (claimed, nothing charged) or 'after-charge' (charged, not committed).
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

/** The app: one external handler, its reconcile asking the gateway by the record's key. */
export function payApp(options: PayOptions): TestApp {
  return {
    schemaSql: PAY_SCHEMA,
    handlers: {
      'pay.charge': {
        effects: 'external',
        lease: options.lease,
        onLeaseExpired: options.onLeaseExpired,
        reconcile: reconcileCharge(options.gateway),
        async handle(input: unknown, ctx: HostContext) {
          const { orderId, amount } = input as { orderId: string; amount: number };
          if (options.crashAt === 'before-charge') {
            console.log('claimed');
            await hang();
          }
          const made = await charge(options.gateway, ctx.idempotencyKey as string, amount);
          if (options.crashAt === 'after-charge') {
            console.log('charged');
            await hang();
          }
          if (options.holdMs) await new Promise((resolve) => setTimeout(resolve, options.holdMs));
          const row = await ctx.store.createIfAbsent('payments', { order_id: orderId, charge_id: made.chargeId }, [
            'order_id',
          ]);
          if (!row.ok) throw new Error(row.error.message);
          return made;
        },
      },
    },
  };
}
