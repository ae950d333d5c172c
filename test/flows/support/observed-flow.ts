import { defineFlow } from '../../../src/flows/index.js';

/**
 * The observability test's crash flow: two steps, then `last`, whose body each process gives (the
 * child hangs in it until it is killed; the process that takes over finishes it).
 */
export function crashFlow(tag: string, last: () => Promise<string>) {
  return defineFlow<{ id: string }, string[]>(`obs-crash-${tag}`, { seed: ['id'] }, async (run) => [
    await run.step('a', () => 'A'),
    await run.step('b', () => 'B'),
    await run.step('last', last),
  ]);
}
