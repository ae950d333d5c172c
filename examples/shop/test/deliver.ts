/**
 * One delivery of a shop webhook as the kit's child processes make it: this process's host of the
 * shop (built with the kit's crash hooks, off unless a crash test runs it) receives the signed
 * event, then drains its event queue, so the consumer runs here and a crash test can kill it at
 * any window of the consumer's execution.
 */
import { signStandardWebhook } from 'oncely/host';
import { invoke, shopHost } from './client.js';

export const SECRET = 'whsec_c2hvcC1leGFtcGxlLXdlYmhvb2stc2VjcmV0';

/** One event as the provider sends it, again and again: the same id, timestamp and body. */
export interface Delivery {
  db: string;
  id: string;
  timestamp: number;
  body: string;
}

/**
 * Posts the event and drains the queue. Answers the stored event's status, replayed when it was
 * applied before this delivery, and its queue attempts as a record's (above 1: this process took
 * over an event whose worker died), so the kit's report reads 'replayed', 'taken over' or
 * 'executed'; throws the intake's refusal with its status as the code.
 */
export async function deliver(call: Delivery) {
  const host = await shopHost(call.db);
  const res = await host.http.request('/v1/webhooks/shop', {
    method: 'POST',
    body: call.body,
    headers: {
      'content-type': 'application/json',
      'webhook-id': call.id,
      'webhook-timestamp': String(call.timestamp),
      'webhook-signature': signStandardWebhook(SECRET, call.id, call.timestamp, call.body),
    },
  });
  if (res.status >= 300) throw Object.assign(new Error(await res.text()), { code: `HTTP_${res.status}` });
  // Applied before this delivery: the consumer ran in an earlier process, and does not run here.
  const replayed = (await host.events.get('shop', call.id))?.status === 'applied';
  await host.events.drain(20_000);
  const event = await host.events.get('shop', call.id);
  if (!event) throw Object.assign(new Error(`event ${call.id} was not stored`), { code: 'EVENT_MISSING' });
  return { value: { status: event.status }, replayed, record: { attempts: event.attempts } };
}

/** Orders made by orders.create and paid by an order.paid delivery, one per name: their ids by name. */
export async function paidOrders(call: { db: string; names: string[] }) {
  const ids: Record<string, string> = {};
  const timestamp = Math.floor(Date.now() / 1000);
  for (const name of call.names) {
    const made = await invoke({
      db: call.db,
      handler: 'orders.create',
      key: `create-${name}`,
      body: { customerId: `cus_${name}`, sku: 'TEA-1', quantity: 1, phone: '+1 555' },
    });
    const orderId = (made.value as { orderId: string }).orderId;
    const body = JSON.stringify({ type: 'order.paid', timestamp, data: { orderId, version: 2 } });
    await deliver({ db: call.db, id: `evt_paid_${name}`, timestamp, body });
    ids[name] = orderId;
  }
  return ids;
}
