import type { HostContext } from '../../../../../src/host/index.js';
import review from '../../flows/review.js';
import ship from '../../flows/ship.js';

/** Writes an order and starts its shipping flow, in one transaction; `failShip` makes the flow fail; `review` starts a review that waits for a signal. */
export const idempotency = { keyFields: ['orderId'] };

export async function handle(
  input: { orderId: string; sku: string; failShip?: boolean; review?: boolean },
  ctx: HostContext,
) {
  const written = await ctx.store.createIfAbsent('dash_orders', { id: input.orderId, sku: input.sku }, ['id']);
  if (!written.ok) throw new Error(written.error.message);
  await ctx.flows.start(ship, { orderId: input.orderId, failShip: input.failShip === true });
  if (input.review) await ctx.flows.start(review, { orderId: input.orderId });
  return { orderId: input.orderId };
}
