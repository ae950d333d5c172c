import { defineFlow } from '../../../src/flows/index.js';

/** The steps of every chaos flow, in order. */
export const CHAOS_STEPS = ['reserve', 'charge', 'ship', 'notify'] as const;

/** The chaos test's flow: 4 steps, each calling `effect` with its step key. */
export function chaosFlow(tag: string, effect: (stepKey: string) => Promise<void>) {
  return defineFlow<{ n: number }, string[]>(`chaos-${tag}`, { seed: ['n'] }, async (run) => {
    const keys: string[] = [];
    for (const step of CHAOS_STEPS)
      keys.push(
        await run.step(step, async (s) => {
          await effect(s.idempotencyKey);
          return s.idempotencyKey;
        }),
      );
    return keys;
  });
}
