import type { OncelyLogger } from '../core/observer.js';

/** A task `oncely serve` runs on a schedule (reconcile, the duplicate scan, retention). */
export interface Scheduled {
  /** Runs the task now unless a run is under way; resolves when that run ends. */
  runNow(): Promise<void>;
  /** No new runs; resolves when the one under way ends. */
  stop(): Promise<void>;
}

/**
 * Runs `task` every `everyMs` (the first run after `firstAfterMs`, default `everyMs`), never two
 * at once: a run longer than the period delays the next instead of stacking beside it. A failed
 * run is logged (the next one tries again); it never stops the schedule or the process.
 */
export function schedule(
  name: string,
  everyMs: number,
  task: () => Promise<unknown>,
  options: { logger?: OncelyLogger; firstAfterMs?: number } = {},
): Scheduled {
  let running: Promise<void> | undefined;
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const arm = (ms: number) => {
    if (stopped) return;
    // unref: a schedule never keeps a process alive that has nothing else to do.
    timer = setTimeout(() => void runNow().finally(() => arm(everyMs)), ms);
    timer.unref();
  };
  const runNow = (): Promise<void> => {
    if (running) return running;
    running = task()
      .then(() => undefined)
      .catch((error: unknown) => {
        const message = error instanceof Error ? error.message : String(error);
        if (options.logger) options.logger.error({ task: name, error: message }, `oncely: ${name} failed`);
        else
          console.error(JSON.stringify({ level: 'error', task: name, error: message, msg: `oncely: ${name} failed` }));
      })
      .finally(() => {
        running = undefined;
      });
    return running;
  };
  arm(options.firstAfterMs ?? everyMs);
  return {
    runNow,
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      await running;
    },
  };
}
