/**
 * Crash windows: the user's code runs in a child process that kills itself with SIGKILL at one
 * window of an execution (reached through the engine's test hooks, never by timing), then a fresh
 * process retries the same intent. Each window's report says what the retry got and how many
 * effects the user's counter saw; a second effect fails the test naming its window.
 */
import type { Duration } from '../core/duration.js';
import { durationOption } from '../core/duration-option.js';
import { InvalidArgumentError } from '../core/errors.js';
import { CRASH_WINDOWS, type CrashWindow } from '../engine/hooks.js';
import { CRASH_ACTION, CRASH_AT, CRASHED_LINE } from './crash-hooks.js';
import { type CallerOutcome, gotOf, RESULT_LINE, table } from './outcome.js';
import { type ChildTarget, parseOutcomes, startChild } from './spawn.js';
import { StormFailedError } from './storm.js';

/** Options of `crashWindows`. */
export interface CrashOptions {
  name?: string;
  /**
   * The code to crash: a module whose export `(input, caller)` makes one call of the intent with an
   * engine or host built with `hooks: crashHooks()`. It gets the window's input.
   */
  child: Omit<ChildTarget, 'input'>;
  /** The windows to crash in, each a case of its own. Default all four. */
  windows?: CrashWindow[];
  /** Only executions of this action die (a host runs several). Default any. */
  action?: string;
  /** Each window's input, so each case has its own key. Default `{ window }`. */
  input?: (window: CrashWindow) => unknown;
  /** The user's count of effects of that window's intent, read after its retry. */
  effects: (window: CrashWindow, input: unknown) => number | Promise<number>;
  /** How long the retry keeps trying while the claim's lease still runs (IN_PROGRESS). Default '15s'. */
  retryFor?: Duration;
  /** @deprecated Write `retryFor`; goes in 0.2.0. */
  retryForMs?: number;
  /** Crash every window at once (each case has its own key): the lease waits overlap. Default false. */
  parallel?: boolean;
}

/** What happened in one window. */
export interface CrashCase {
  window: CrashWindow;
  /** Whether the first process died at the window (false: it never reached it). */
  crashed: boolean;
  /** What the fresh process's retry got. */
  retry: CallerOutcome;
  /** In words: 'replayed', 'taken over', 'executed', 'OUTCOME_UNKNOWN', another code. */
  got: string;
  effects: number;
  /** Why the case failed; absent when it passed. */
  problem?: string;
}

/** The cases of a crash test, and their table. */
export interface CrashReport {
  name: string;
  cases: CrashCase[];
  ok: boolean;
  table: string;
}

/**
 * Crashes the code at each window and retries it from a fresh process; throws StormFailedError
 * naming the window when one left a second effect, was never reached, or lost the effect of a retry that succeeded.
 * @example await crashWindows({ child: { module: fileURLToPath(new URL('./charge-once.ts', import.meta.url)) }, effects: (w) => gateway.effects.length });
 */
export async function crashWindows(options: CrashOptions): Promise<CrashReport> {
  const windows = options.windows ?? [...CRASH_WINDOWS];
  for (const w of windows)
    if (!CRASH_WINDOWS.includes(w)) throw new InvalidArgumentError(`unknown crash window ${String(w)}`);
  if (typeof options.effects !== 'function') throw new InvalidArgumentError('effects must be a function');
  const retryForMs = durationOption(options, 'retryFor', 'retryForMs', '15s', 'crashWindows');
  const one = async (window: CrashWindow): Promise<CrashCase> => {
    const input = options.input ? options.input(window) : { window };
    const env: Record<string, string> = {
      ...options.child.env,
      [CRASH_AT]: window,
      ...(options.action ? { [CRASH_ACTION]: options.action } : {}),
    };
    const first = startChild({ ...options.child, input, env }, { mode: 'once' });
    const died = await first.exited;
    const crashed = died.signal === 'SIGKILL' && first.lines.some((l) => l.startsWith(`${CRASHED_LINE} ${window}`));
    const again = startChild({ ...options.child, input }, { mode: 'retry', retryForMs });
    const [retry] = parseOutcomes(await again.line(RESULT_LINE)) as [CallerOutcome];
    await again.exited;
    const effects = await options.effects(window, input);
    const got = gotOf(retry);
    return { window, crashed, retry, got, effects, ...problemOf(window, crashed, retry, got, effects, died) };
  };
  const cases: CrashCase[] = [];
  if (options.parallel) cases.push(...(await Promise.all(windows.map(one))));
  else for (const window of windows) cases.push(await one(window));
  const name = options.name ?? 'crash windows';
  const ok = cases.every((c) => c.problem === undefined);
  const report: CrashReport = {
    name,
    cases,
    ok,
    table: `${name}\n${table(
      ['window', 'crashed', 'retry got', 'effects', 'problem'],
      cases.map((c) => [c.window, c.crashed ? 'SIGKILL' : 'no', c.got, String(c.effects), c.problem ?? '']),
    )}`,
  };
  if (!ok) {
    const failed = cases.filter((c) => c.problem).map((c) => `${c.window}: ${c.problem}`);
    throw new StormFailedError(`${name}: ${failed.join('; ')}\n${report.table}`, report);
  }
  return report;
}

function problemOf(
  window: CrashWindow,
  crashed: boolean,
  retry: CallerOutcome,
  got: string,
  effects: number,
  died: { code: number | null; signal: NodeJS.Signals | null; stderr: string },
): { problem?: string } {
  if (!crashed)
    return {
      problem: `never reached window '${window}' (exit ${died.code ?? died.signal}): build the engine or host with hooks: crashHooks()${died.stderr ? `; stderr: ${died.stderr.trim().slice(-300)}` : ''}`,
    };
  if (effects > 1)
    return { problem: `the crash at '${window}' produced a second effect (${effects}; the retry got ${got})` };
  if (retry.ok && effects !== 1) return { problem: `the retry succeeded (${got}) but ${effects} effects were counted` };
  if (retry.code === 'IN_PROGRESS')
    return { problem: 'the retry still found the claim held: lease longer than retryFor' };
  if (!retry.ok && retry.code !== 'OUTCOME_UNKNOWN')
    return { problem: `the retry failed: ${retry.code ?? retry.message}` };
  return {};
}
