import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { sqliteSubject } from './engine.js';
import { measure, warmUp } from './harness.js';
import { scratchDir } from './setup.js';

/** Heap growth of the SQLite store over many unique keys. */
export interface MemoryResult {
  keys: number;
  /** Heap used after full collections, before and after the keys ran, in bytes. */
  heapBefore: number;
  heapAfter: number;
  heapDeltaPer10kKeys: number;
  /** How garbage was collected before each reading. */
  gc: string;
}

/** Keys run before the first reading, so JIT and statement caches are already full. */
const WARM_KEYS = 10_000;

/** `global.gc` under --expose-gc; otherwise the flag is set at run time and gc fetched from a fresh context. */
function collector(): { gc: () => void; how: string } {
  const exposed = (globalThis as { gc?: () => void }).gc;
  if (exposed) return { gc: exposed, how: 'global.gc from --expose-gc' };
  setFlagsFromString('--expose-gc');
  return { gc: runInNewContext('gc') as () => void, how: 'gc exposed at run time (no --expose-gc)' };
}

// Several full collections: V8 drops old bytecode and code caches only after a few, and would
// otherwise shrink the heap between the readings and hide growth.
function settledHeap(gc: () => void): number {
  for (let i = 0; i < 8; i++) gc();
  return process.memoryUsage().heapUsed;
}

/**
 * Runs `keys` first executions on a fresh SQLite store and reports the heap growth per 10,000
 * keys after full collections: records live in the file, so it should stay near zero.
 */
export async function measureMemory(keys: number, concurrency: number): Promise<MemoryResult> {
  const { gc, how } = collector();
  const dir = scratchDir();
  const subject = await sqliteSubject(dir.path);
  try {
    await warmUp(subject.first, WARM_KEYS, concurrency, 0);
    const before = settledHeap(gc);
    const run = await measure(subject.first, { n: keys, maxMs: Number.POSITIVE_INFINITY, concurrency }, WARM_KEYS);
    const after = settledHeap(gc);
    return {
      keys: run.ops,
      heapBefore: before,
      heapAfter: after,
      heapDeltaPer10kKeys: ((after - before) * 10_000) / run.ops,
      gc: how,
    };
  } finally {
    await subject.close();
    dir.remove();
  }
}
