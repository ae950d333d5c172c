import { describe, expect, it } from 'vitest';
import { Batcher, type BatcherOptions } from '../../src/core/batcher.js';

/** A batcher doubling numbers that records the size of every batch it ran. */
function doubling(options: BatcherOptions<number> = {}) {
  const sizes: number[] = [];
  const batcher = new Batcher<number, number>(async (items) => {
    sizes.push(items.length);
    return items.map((n) => n * 2);
  }, options);
  return { batcher, sizes };
}

/**
 * Pushes one item from each of `n` callbacks of one loop turn (setImmediate callbacks queued
 * together run in one check phase, as socket callbacks of one poll phase do), and resolves with
 * their answers once all are in.
 */
function onePerCallback(batcher: Batcher<number, number>, n: number): Promise<number[]> {
  return new Promise((resolve) => {
    const answers: Promise<number>[] = [];
    for (let i = 1; i <= n; i++)
      setImmediate(() => {
        answers.push(batcher.push(i));
        if (answers.length === n) void Promise.all(answers).then(resolve);
      });
  });
}

/** Resolves on the next loop turn's check phase, after the setImmediate callbacks queued so far. */
const nextTurn = () => new Promise((r) => setImmediate(r));

describe('Batcher', () => {
  it('answers each caller in item order, and an Error answer fails only its own caller', async () => {
    const batcher = new Batcher<number, number>(async (items) => items.map((n) => (n === 2 ? new Error('two') : n)));
    const calls = [batcher.push(1), batcher.push(2), batcher.push(3)];
    expect(await calls[0]).toBe(1);
    await expect(calls[1]).rejects.toThrow('two');
    expect(await calls[2]).toBe(3);
  });

  it("'microtask' (the default): the callers of one tick share a batch, those of separate callbacks do not", async () => {
    const tick = doubling();
    expect(await Promise.all([1, 2, 3].map((n) => tick.batcher.push(n)))).toEqual([2, 4, 6]);
    expect(tick.sizes).toEqual([3]);
    const callbacks = doubling({ maxInFlight: 8 });
    expect(await onePerCallback(callbacks.batcher, 4)).toEqual([2, 4, 6, 8]);
    expect(callbacks.sizes).toEqual([1, 1, 1, 1]);
  });

  it("'auto': a lone caller waits for the turn's end, so callers of one turn's callbacks share a batch", async () => {
    const { batcher, sizes } = doubling({ maxBatch: 8, maxInFlight: 8, gather: 'auto' });
    expect(await onePerCallback(batcher, 4)).toEqual([2, 4, 6, 8]);
    expect(sizes).toEqual([4]);
    // A lone caller of its own, with nothing else in the turn, is still answered.
    expect(await batcher.push(5)).toBe(10);
    expect(sizes).toEqual([4, 1]);
  });

  it("'auto': half a batch or more caught in one tick goes at once, fewer wait for the turn's end", async () => {
    const { batcher, sizes } = doubling({ maxBatch: 6, maxInFlight: 8, gather: 'auto' });
    let turn = nextTurn().then(() => [...sizes]);
    let answers = Promise.all([1, 2, 3].map((n) => batcher.push(n)));
    // Sent (and answered) before the check phase that a wait for the turn's end would run in.
    expect(await turn).toEqual([3]);
    expect(await answers).toEqual([2, 4, 6]);
    turn = nextTurn().then(() => [...sizes]);
    answers = Promise.all([4, 5].map((n) => batcher.push(n)));
    expect(await turn).toEqual([3]);
    expect(await answers).toEqual([8, 10]);
    expect(sizes).toEqual([3, 2]);
  });

  it("'auto': while a lone caller waits for the turn's end, each batch goes once it is full", async () => {
    const sent: number[][] = [];
    const batcher = new Batcher<number, number>(
      async (items) => {
        sent.push([...items]);
        return items;
      },
      { maxBatch: 3, maxInFlight: 8, gather: 'auto' },
    );
    // The batches sent by the time each caller joined: the full ones, never the partial one.
    const seen: number[] = [];
    const answers = new Promise<number[]>((resolve) => {
      const calls: Promise<number>[] = [];
      for (let i = 1; i <= 7; i++)
        setImmediate(() => {
          calls.push(batcher.push(i));
          seen.push(sent.length);
          if (i === 7) void Promise.all(calls).then(resolve);
        });
    });
    expect(await answers).toEqual([1, 2, 3, 4, 5, 6, 7]);
    expect(sent).toEqual([[1, 2, 3], [4, 5, 6], [7]]);
    expect(seen).toEqual([0, 0, 0, 1, 1, 1, 2]);
  });

  it('holds callers while maxInFlight batches are out, and sends them together when one returns', async () => {
    for (const gather of ['microtask', 'auto'] as const) {
      const sizes: number[] = [];
      let release!: () => void;
      const held = new Promise<void>((r) => {
        release = r;
      });
      const batcher = new Batcher<number, number>(
        async (items) => {
          sizes.push(items.length);
          if (sizes.length === 1) await held;
          return items;
        },
        { gather },
      );
      const first = batcher.push(0);
      await nextTurn();
      await nextTurn();
      expect(sizes).toEqual([1]);
      const rest = await new Promise<Promise<number>[]>((resolve) => {
        const calls: Promise<number>[] = [];
        for (let i = 1; i <= 5; i++)
          setImmediate(() => {
            calls.push(batcher.push(i));
            if (i === 5) resolve(calls);
          });
      });
      await nextTurn();
      expect(sizes).toEqual([1]);
      release();
      expect(await Promise.all([first, ...rest])).toEqual([0, 1, 2, 3, 4, 5]);
      expect(sizes).toEqual([1, 5]);
    }
  });
});
