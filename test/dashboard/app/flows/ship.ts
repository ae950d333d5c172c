import { existsSync } from 'node:fs';
import { defineFlow } from '../../../../src/flows/index.js';

/** Reserves, then labels: with `failShip` the label step fails (two attempts) while the file DASH_LEDGER_UP names is missing. */
export default defineFlow('ship', { seed: ['orderId'] }, async (run, input: { orderId: string; failShip: boolean }) => {
  const reserved = await run.step('reserve', (s) => ({ key: s.idempotencyKey }));
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
