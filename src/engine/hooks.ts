/**
 * Test-only hooks at the crash windows of a call, for oncely/testing's crash tests: a test kills
 * its process inside one (SIGKILL) and retries from a fresh one. Absent in production: the engine
 * checks `if (hooks)` once per window, nothing more.
 */

/**
 * The windows of one execution, in order:
 * - 'claimed': the claim is stored (committed, under claimIn), the function not yet called.
 * - 'before-effect': the lease keeper runs and the function is about to be called.
 * - 'after-effect': the function returned (its effect happened), the outcome not yet stored.
 * - 'completed': the outcome is stored, the caller has not got it yet.
 */
export type CrashWindow = 'claimed' | 'before-effect' | 'after-effect' | 'completed';

/** The windows in order. */
export const CRASH_WINDOWS: readonly CrashWindow[] = ['claimed', 'before-effect', 'after-effect', 'completed'];

/** The call a hook is told about. */
export interface HookCall {
  tenant: string;
  action: string;
  key: string;
  /** The claim's fencing token: 1 for a first claim, higher after takeovers. */
  fence: number;
}

/** Called at each window of each execution; the call waits for it. */
export type TestHooks = (window: CrashWindow, call: HookCall) => void | Promise<void>;
