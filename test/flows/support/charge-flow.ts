import type { Db } from '../../../src/db/index.js';
import { defineFlow } from '../../../src/flows/index.js';

/**
 * The crash test's flow: `reserve`, then `charge`, whose effect is a row of `charge_attempts` with
 * the step's key, the attempt it was told and the process that ran it (a downstream that logs
 * every call it gets).
 */
export function chargeFlow(tag: string, db: Db, by: string) {
  return defineFlow<{ order: string }, string>(`charge-${tag}`, { seed: ['order'] }, async (run) => {
    await run.step('reserve', () => 'reserved');
    return run.step('charge', async (s) => {
      await db.run('INSERT INTO charge_attempts (step_key, attempt, worker) VALUES (?, ?, ?)', [
        s.idempotencyKey,
        s.attempt,
        by,
      ]);
      return `charged ${s.idempotencyKey}`;
    });
  });
}
