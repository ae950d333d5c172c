import { defineFlow } from '../../../../src/flows/index.js';

/** Waits for a person's `approved` signal (its payload says who), then finishes. */
export default defineFlow('review', { seed: ['orderId'] }, async (run, _input: { orderId: string }) =>
  run.waitFor('approved'),
);
