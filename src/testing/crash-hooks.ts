import { writeSync } from 'node:fs';
import { InvalidArgumentError } from '../core/errors.js';
import { CRASH_WINDOWS, type CrashWindow, type TestHooks } from '../engine/hooks.js';

/** The environment variable a crash test's child reads: the window to die in. */
export const CRASH_AT = 'ONCELY_CRASH_AT';
/** Optional: only an execution of this action dies (others pass the window). */
export const CRASH_ACTION = 'ONCELY_CRASH_ACTION';
/** The line a child prints right before it kills itself, followed by the window. */
export const CRASHED_LINE = 'oncely:crashed';

/**
 * Where the kit's child (child.ts) keeps a 'completed' crash for later: set while it runs a crash
 * test's call. A global, not a module variable: the user's module may load oncely/testing from
 * another copy (the package's build) than the child's.
 */
const DEFERRED = Symbol.for('oncely.testing.deferredCrash');
interface DeferredSlot {
  pending?: string;
}
type WithSlot = typeof globalThis & { [DEFERRED]?: DeferredSlot };

/** The kit's child: keep a 'completed' crash until the call has returned (see `crashHooks`). */
export function deferCompletedCrash(): void {
  (globalThis as WithSlot)[DEFERRED] = {};
}

/** The kit's child, once the call returned: dies now if a 'completed' crash was kept for this moment. */
export function crashIfDeferred(): void {
  const pending = (globalThis as WithSlot)[DEFERRED]?.pending;
  if (pending !== undefined) die(pending);
}

function die(line: string): never {
  // Written synchronously: the kill below leaves no chance to flush a stream.
  writeSync(1, `${CRASHED_LINE} ${line}\n`);
  process.kill(process.pid, 'SIGKILL');
  // Nothing more of this process runs while the signal lands: no write, no release, no answer.
  for (;;) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
}

/**
 * The hooks a crash test needs, or undefined when this process is not a crash test's child (no
 * ONCELY_CRASH_AT): pass them to `createOncely({ hooks })`, `createFlows({ hooks })` or `openHost(dir, db, { hooks })` in
 * the code `crashWindows` runs. At the named window the process prints a line and kills itself
 * with SIGKILL: no finally block, no exit handler, no flush, as a power cut or the OOM killer.
 *
 * 'completed' under the kit's child dies when the call it runs has returned, before its answer
 * leaves the process: the engine reaches that window once it wrote the outcome, which inside a
 * transaction (a host handler's, a consumer's, a `tx` of yours) is before that commits; a kill
 * there would roll the outcome back, and the window the caller cares about, the answer lost after
 * the commit, would never be tested. Elsewhere it dies at the window itself, as it does at a flow
 * step's 'completed' (`createFlows({ hooks })`): the step's completion is a write of its own, and
 * the window is the flow not yet moved on.
 * @example const once = await createOncely({ store, hooks: crashHooks() });
 */
export function crashHooks(env: NodeJS.ProcessEnv = process.env): TestHooks | undefined {
  const at = env[CRASH_AT];
  if (!at) return undefined;
  if (!CRASH_WINDOWS.includes(at as CrashWindow))
    throw new InvalidArgumentError(`${CRASH_AT} must be one of ${CRASH_WINDOWS.join(', ')}, got ${at}`);
  const action = env[CRASH_ACTION];
  return (window, call) => {
    if (window !== at || (action && call.action !== action)) return;
    const line = `${window} ${call.action} ${call.key}`;
    const slot = (globalThis as WithSlot)[DEFERRED];
    // A flow step's completion is its own write, committed when the window comes: dies there, before the flow moves on.
    const step = (call as { surface?: unknown }).surface === 'flow';
    if (window === 'completed' && slot && !step) slot.pending ??= line;
    else die(line);
  };
}
