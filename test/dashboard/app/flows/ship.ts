import { existsSync } from 'node:fs';
import { defineFlow } from '../../../../src/flows/index.js';

/** Reserves (released on a final failure), then labels: with `failShip` the label step fails (two attempts) while the file DASH_LEDGER_UP names is missing. */
export default defineFlow('ship', { seed: ['orderId'] }, async (run, input: { orderId: string; failShip: boolean }) => {
  // Released again when the flow fails for good: the timeline shows the reservation as compensated.
  const reserved = await run.step('reserve', (s) => ({ key: s.idempotencyKey }), {
    compensate: (value) => ({ released: value }),
  });
  await run.step(
    'label',
    () => {
      if (input.failShip && !existsSync(process.env.DASH_LEDGER_UP ?? ''))
        throw Object.assign(new Error('the label printer is out of paper'), { code: 'NO_PAPER' });
      return { label: `L-${input.orderId}` };
    },
    { retry: { attempts: 2, backoff: '10ms' } },
  );
  return reserved;
});
