import type { HostContext, HostEvent } from 'oncely/host';
import { byOrder, loadOrder, must, orderOf } from '../../shop.js';

/** Refunds carry a newer version than payments, so a payment arriving after its refund is stale. */
export const ordering = byOrder;

/** Writes the refund line and cancels the parcel: once per refund. */
export async function handle(event: HostEvent, ctx: HostContext) {
  const order = await loadOrder(ctx.store, orderOf(event).orderId);
  must(
    await ctx.store.createIfAbsent(
      'ledger',
      { id: ctx.requestId, orderId: order.id, kind: 'refund', amountCents: -order.amountCents },
      ['id'],
    ),
  );
  must(
    await ctx.store.createIfAbsent('parcels', { id: ctx.requestId, orderId: order.id, status: 'cancelled' }, ['id']),
  );
  must(await ctx.store.update('orders', { id: order.id }, { status: 'refunded' }));
}
