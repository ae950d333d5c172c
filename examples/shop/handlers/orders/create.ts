import type { HostContext } from 'oncely/host';
import { loadProduct } from '../../products.js';
import { must } from '../../shop.js';

/** Clients retry this after timeouts: a key is required, and a replay answers with the first order. */
export const idempotency = { required: true, ttl: '24h' };

/** The input of the curl line `oncely serve` prints. */
export const example = { customerId: 'cus_1', sku: 'TEA-1', quantity: 1, phone: '+86 138 0000 0000' };

/** Creates an order; its id comes from the request's key, so a retry can never create a second one. */
export async function handle(
  input: { customerId: string; sku: string; quantity: number; phone: string },
  ctx: HostContext,
) {
  const product = await loadProduct(ctx.store, input.sku);
  const id = `ord_${ctx.stableId('order').slice(0, 18)}`;
  const { created } = must(
    await ctx.store.createIfAbsent(
      'orders',
      {
        id,
        customerId: input.customerId,
        sku: input.sku,
        quantity: input.quantity,
        amountCents: product.priceCents * input.quantity,
        phone: input.phone,
        status: 'created',
      },
      ['id'],
    ),
  );
  ctx.log.info({ id, created }, 'order created');
  return { orderId: id, amountCents: product.priceCents * input.quantity };
}
