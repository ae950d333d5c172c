/**
 * A capture whose holder dies mid-call like pay.charge's, but with a reconcile function: asked
 * about its key, the "gateway" says the capture was made, so `oncely reconcile` settles the record
 * with that value (by 'reconciler') and no person has to.
 */
import type { Reconcile } from '../../../../../src/index.js';

export const idempotency = { required: true };
export const effects = 'external';
export const lease = '1s';
export const onLeaseExpired = 'hold';
export const reconcile: Reconcile = (record) => ({ value: { captureId: `cap_found_${record.key}` } });

export async function handle(input: { orderId: string; hang?: boolean }) {
  if (input.hang) await new Promise(() => {});
  return { captureId: `cap_${input.orderId}` };
}
