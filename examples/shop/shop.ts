import type { DataStore, HostEvent, Result } from 'oncely/host';

/** What the shop's payment provider sends in `data`. */
export interface OrderEvent {
  orderId: string;
  /** Business version of the order: created 1, paid 2, refunded 3. */
  version: number;
}

/** The event's `data` (Standard Webhooks bodies are `{ type, timestamp, data }`). */
export function orderOf(event: HostEvent): OrderEvent {
  return (event.data as { data: OrderEvent }).data;
}

/** Ordering shared by the order consumers: by order, by business version. */
export const byOrder = {
  aggregate: (e: HostEvent) => orderOf(e).orderId,
  version: (e: HostEvent) => orderOf(e).version,
};

/** The data of a store result; a refused write is a bug in this app, so it fails the consumer (and is retried). */
export function must<T>(result: Result<T>): T {
  if (!result.ok) throw Object.assign(new Error(result.error.message), { code: result.error.code });
  return result.data;
}

/** The order, which the provider only knows about after orders.create committed. */
export async function loadOrder(store: DataStore, id: string) {
  const order = must(await store.get('orders', { id }));
  if (!order) throw new Error(`order ${id} is unknown`);
  return order as { id: string; sku: string; quantity: number; amountCents: number; phone: string; status: string };
}
