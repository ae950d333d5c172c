import { defineFlow } from 'oncely/flows';

/** Packs and ships a paid order; its id comes from the order, so one order has one fulfilment. */
export default defineFlow<{ orderId: string }, string>('order-fulfilment', { seed: ['orderId'] }, async (run, input) =>
  run.step('pack', async () => `packed ${input.orderId}`),
);
