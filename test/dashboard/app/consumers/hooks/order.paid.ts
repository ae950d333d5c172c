import { existsSync } from 'node:fs';
import type { HostContext } from '../../../../../src/host/index.js';

/** Applies a payment: one `applied` row per execution; fails while the file DASH_LEDGER_UP names is missing. */
export async function handle(event: { data: { orderId: string } }, ctx: HostContext) {
  const up = process.env.DASH_LEDGER_UP;
  if (up && !existsSync(up)) throw Object.assign(new Error('the ledger is down'), { code: 'LEDGER_DOWN' });
  const id = ctx.stableId('applied');
  const written = await ctx.store.createIfAbsent('applied', { id, eventId: event.data.orderId }, ['id']);
  if (!written.ok) throw new Error(written.error.message);
}
