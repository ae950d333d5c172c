import type { HostContext, HostEvent } from 'oncely/host';
import { must } from '../../shop.js';

/**
 * The SMS gateway, fed by the outbox relay (at least once, the outbox id as the event id). The
 * gateway would take ctx.idempotencyKey; here the sent message is a row, one per execution.
 */
export async function handle(event: HostEvent, ctx: HostContext) {
  const sms = event.data as { phone: string; text: string };
  await new Promise((r) => setTimeout(r, 20)); // a slow gateway: a kill -9 lands mid-consumer
  must(await ctx.store.createIfAbsent('sms_sent', { id: ctx.requestId, phone: sms.phone, text: sms.text }, ['id']));
}
