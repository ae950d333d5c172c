import type { HostContext } from 'oncely/host';
import { loadOrder, must } from '../../shop.js';

/** Clients retry this after timeouts: a key is required, and the gateway gets the same key on every attempt. */
export const idempotency = { required: true, ttl: '24h' } as const;

/**
 * The charge happens at the gateway, outside the database: the claim is committed first, so a
 * host that dies mid-call leaves it claimed and the next caller takes over with the same key.
 */
export const effects = 'external' as const;

/** Short: a host killed mid-call hands its charge over within seconds (the gateway call takes milliseconds). */
export const lease = '2s';

/** The input of the curl line `oncely serve` prints. */
export const example = { orderId: 'ord_1' };

function gatewayUrl(): string {
  const url = process.env.SHOP_GATEWAY_URL;
  if (!url) throw Object.assign(new Error('SHOP_GATEWAY_URL is not set'), { code: 'GATEWAY_UNSET' });
  return url;
}

/** Charges the order at the gateway under the request's key, then writes the charge row. */
export async function handle(input: { orderId: string }, ctx: HostContext) {
  const order = await loadOrder(ctx.store, input.orderId);
  const res = await fetch(`${gatewayUrl()}/charges`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': ctx.idempotencyKey as string },
    body: JSON.stringify({ orderId: order.id, amountCents: order.amountCents }),
  });
  if (!res.ok) throw Object.assign(new Error(`gateway answered ${res.status}`), { code: 'GATEWAY_FAILED' });
  const charge = (await res.json()) as { id: string };
  // Keyed by the physical attempt: a second execution would show as a second row.
  must(
    await ctx.store.createIfAbsent('charges', { id: ctx.requestId, orderId: order.id, chargeId: charge.id }, ['id']),
  );
  return { orderId: order.id, chargeId: charge.id };
}
