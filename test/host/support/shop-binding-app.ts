/**
 * The shop's orders.fulfil handler (examples/shop/handlers/orders/fulfil.ts) with its fulfilment
 * flow, as a test app. `crashAt: 'after-update'` wraps the handler's store so that once the order's
 * update returns, the process prints `updated` and hangs there, for the test to kill -9 it between
 * the update and the flow's start.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import fulfilment from '../../../examples/shop/flows/fulfilment.js';
import * as fulfil from '../../../examples/shop/handlers/orders/fulfil.js';
import type { HostContext } from '../../../src/host/context.js';
import type { TestApp } from '../../support/host-app.js';

/** How one host of the test app behaves. */
export interface BindingOptions {
  lease: number;
  crashAt?: 'after-update';
}

const SCHEMA = readFileSync(fileURLToPath(new URL('../../../examples/shop/schema.sql', import.meta.url)), 'utf8');

/** The app: the shop's schema, orders.fulfil with a short lease, and the fulfilment flow. */
export function bindingApp(options: BindingOptions): TestApp {
  return {
    schemaSql: SCHEMA,
    flows: [fulfilment],
    handlers: {
      'orders.fulfil': {
        ...fulfil,
        lease: options.lease,
        handle(input: unknown, ctx: HostContext) {
          return fulfil.handle(input as { orderId: string }, options.crashAt ? hangAfterUpdate(ctx) : ctx);
        },
      },
    },
  };
}

/** The context with a store whose update, once it returned, prints `updated` and never resolves. */
function hangAfterUpdate(ctx: HostContext): HostContext {
  const store = new Proxy(ctx.store, {
    get(target, name, receiver) {
      if (name !== 'update') return Reflect.get(target, name, receiver);
      return async (...args: Parameters<HostContext['store']['update']>) => {
        await target.update(...args);
        console.log('updated');
        return new Promise<never>(() => {});
      };
    },
  });
  return new Proxy(ctx, {
    get: (target, name, receiver) => (name === 'store' ? store : Reflect.get(target, name, receiver)),
  });
}
