import type { HandlerModule, HostContext } from 'oncely/host';

/** The key is the Idempotency-Key header; a request without one is keyed by its `orderId`. */
export const idempotency: HandlerModule['idempotency'] = { keyFields: ['orderId'], ttl: '24h' };

/** The input of the curl line `oncely serve` prints. */
export const example = { orderId: 'ORD-1', customerId: 'cus_1', amountCents: 4200 };

/** Creates an order once: a retry with the same key gets the first answer back, replayed. */
export async function handle(input: typeof example, ctx: HostContext) {
  const row = { id: input.orderId, customerId: input.customerId, amountCents: input.amountCents, status: 'created' };
  const created = await ctx.store.createIfAbsent('orders', row, ['id']);
  if (!created.ok) throw Object.assign(new Error(created.error.message), { status: 400, code: created.error.code });
  ctx.log.info({ id: input.orderId, created: created.data.created }, 'order created');
  return { orderId: input.orderId, status: created.data.record.status };
}
