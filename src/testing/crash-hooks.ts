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
 * The hooks a crash test needs, or undefined when this process is not a crash test's child (no
 * ONCELY_CRASH_AT): pass them to `createOncely({ hooks })` or `openHost(dir, db, { hooks })` in
 * the code `crashWindows` runs. At the named window the process prints a line and kills itself
 * with SIGKILL: no finally block, no exit handler, no flush, as a power cut or the OOM killer.
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
    // Written synchronously: the kill below leaves no chance to flush a stream.
    writeSync(1, `${CRASHED_LINE} ${window} ${call.action} ${call.key}\n`);
    process.kill(process.pid, 'SIGKILL');
  };
}
