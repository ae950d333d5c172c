import type { HostContext } from 'oncely/host';
import fulfilment from '../../flows/fulfilment.js';
import { loadOrder, must } from '../../shop.js';

/** Clients retry this after timeouts: a key is required, and a replay answers with the first result. */
export const idempotency = { required: true, ttl: '24h' } as const;

/**
 * The claim is committed on its own before the handler runs, so the order's move and the flow's
 * start are not one transaction with it: a crash between them is retried by the next caller.
 */
export const effects = 'external' as const;

/** Short, as the shop's other leases: a retry after a host died here takes the claim over within seconds. */
export const lease = '5s';

/** The input of the curl line `oncely serve` prints. */
export const example = { orderId: 'ord_1' };

/** Moves a paid order to 'fulfilling' and starts its fulfilment flow, keyed by the order. */
export async function handle(input: { orderId: string }, ctx: HostContext) {
  const { affected } = must(
    await ctx.store.update('orders', { id: input.orderId, status: 'paid' }, { status: 'fulfilling' }),
  );
  if (affected === 0) {
    // 0 rows says the order already moved, not that its flow started: an earlier attempt (another
    // key, or a writer that died after the move) may have stopped in between. Re-read the binding.
    const order = await loadOrder(ctx.store, input.orderId);
    if (order.status !== 'fulfilling')
      throw Object.assign(new Error(`order ${order.id} is ${order.status}, not paid`), { code: 'ORDER_NOT_PAID' });
  }
  // Keyed by the order: started if missing, returned as it is if it exists; never a second one.
  const { workflowId, already } = await ctx.flows.start(fulfilment, { orderId: input.orderId });
  ctx.log.info({ orderId: input.orderId, workflowId, already, moved: affected === 1 }, 'fulfilment started');
  return { orderId: input.orderId, workflowId, already };
}
