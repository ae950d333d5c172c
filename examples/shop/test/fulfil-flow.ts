/**
 * One fulfilment of a paid order as the kit's child processes make it: orders.fulfil starts the
 * order's flow, then this process's host runs it with its flow worker, so a crash test can kill
 * the host at any window of the flow's step 'pack' (the host is built with the kit's crash hooks,
 * which reach its flows too).
 */
import { flowResult } from 'oncely/testing';
import { invoke, shopHost } from './client.js';

/** Fulfils the order under `key` and waits for its flow; answers it the kit's way (replayed, taken over, executed). */
export async function fulfilFlow(call: { db: string; orderId: string; key: string }) {
  const started = await invoke({
    db: call.db,
    handler: 'orders.fulfil',
    key: call.key,
    body: { orderId: call.orderId },
  });
  const { workflowId } = started.value as { workflowId: string };
  const host = await shopHost(call.db);
  if (!host.flows) throw new Error('the shop has no flows');
  // The shop's flows lease for 5 s: a run whose process died is taken over after it.
  return flowResult(host.flows, workflowId, { timeout: '60s' });
}
