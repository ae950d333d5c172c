import type { HostContext, HostEvent } from 'oncely/host';

/** The body a payments sender posts: Standard Webhooks' `{ type, timestamp, data }`. */
interface PaymentSucceeded {
  type: 'payment.succeeded';
  data: { orderId: string; amountCents: number };
}

/** Marks the order paid, once per event id (the consumer's idempotency key), however often it is delivered. */
export async function handle(event: HostEvent, ctx: HostContext) {
  // `event.data` is the whole webhook body, so the sender's payload is `event.data.data`.
  const { data } = event.data as PaymentSucceeded;
  const paid = await ctx.store.update('orders', { id: data.orderId, status: 'created' }, { status: 'paid' });
  // A throw is retried with backoff, then dead-lettered: an unknown order may simply not exist yet.
  if (!paid.ok) throw new Error(paid.error.message);
  if (paid.data.affected === 0) throw new Error(`order ${data.orderId} is not waiting for a payment`);
  ctx.log.info({ orderId: data.orderId }, 'order paid');
}
