/**
 * A charge whose outcome a person must settle when its holder dies (effects 'external', 'hold'):
 * `hang` keeps the call open, so the test can kill the process with SIGKILL mid-call.
 */
export const idempotency = { required: true };
export const effects = 'external';
export const lease = '1s';
export const onLeaseExpired = 'hold';

export async function handle(input: { orderId: string; hang?: boolean }) {
  if (input.hang) await new Promise(() => {});
  return { chargeId: `ch_${input.orderId}` };
}
