import { type HostContext, type HostEvent, op } from 'oncely/host';
import { byOrder, loadOrder, must, orderOf } from '../../shop.js';

/** A payment older than the order's stored version (a refund came first) is stale and not applied. */
export const ordering = byOrder;

/** Takes the stock, writes the ledger line, marks the parcel, and queues the SMS: once per payment. */
export async function handle(event: HostEvent, ctx: HostContext) {
  const order = await loadOrder(ctx.store, orderOf(event).orderId);
  // Relative and guarded in one statement: concurrent payments never lose each other's stock change.
  const { affected } = must(
    await ctx.store.update(
      'products',
      { sku: order.sku, stock: op.gte(order.quantity) },
      { stock: op.increment(-order.quantity) },
    ),
  );
  if (affected !== 1) throw Object.assign(new Error(`out of stock for ${order.sku}`), { code: 'OUT_OF_STOCK' });
  // Rows keyed by the physical attempt: a second execution would show as a second row.
  must(
    await ctx.store.createIfAbsent(
      'stock_moves',
      { id: ctx.requestId, orderId: order.id, sku: order.sku, delta: -order.quantity },
      ['id'],
    ),
  );
  must(
    await ctx.store.createIfAbsent(
      'ledger',
      { id: ctx.requestId, orderId: order.id, kind: 'payment', amountCents: order.amountCents },
      ['id'],
    ),
  );
  must(
    await ctx.store.createIfAbsent('parcels', { id: ctx.requestId, orderId: order.id, status: 'ready_to_ship' }, [
      'id',
    ]),
  );
  must(await ctx.store.update('orders', { id: order.id }, { status: 'paid' }));
  await ctx.outbox.enqueue('sms.send', { phone: order.phone, text: `Order ${order.id} is paid. Thank you!` });
}
