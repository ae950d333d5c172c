import type { RunContext } from '../engine/context.js';
import type { Oncely, RunRequest } from '../engine/engine.js';

/**
 * A run whose claim is committed first (the engine's `claimIn`), its function still to come:
 * `answered` when the engine answered without running (a replay), else the claim's context with
 * `complete` (the outcome joins `tx`, with the function's writes; throws when the engine could not
 * write it there, so the caller rolls those back) and `abandon` (after a rollback: the key is
 * released, or the failure stored per the request's onError; nothing once complete ran).
 */
export type ClaimedFirst =
  | { kind: 'answered' }
  | {
      kind: 'claimed';
      context: RunContext;
      complete(tx: unknown): Promise<void>;
      abandon(reason: unknown): Promise<void>;
    };

/** Claims `request`'s key first; refusals (IN_PROGRESS, OUTCOME_UNKNOWN, a replayed failure) reject. */
export function claimFirst(once: Oncely, request: RunRequest): Promise<ClaimedFirst> {
  return new Promise<ClaimedFirst>((resolve, reject) => {
    let claimed = false;
    let settle!: { resolve: (value: null) => void; reject: (reason: unknown) => void };
    const outcome = new Promise<null>((ok, fail) => {
      settle = { resolve: ok, reject: fail };
    });
    const run = once.run(request, (context) => {
      claimed = true;
      resolve({
        kind: 'claimed',
        context,
        complete: async (tx) => {
          context.completeIn(tx);
          settle.resolve(null);
          await run;
        },
        abandon: async (reason) => {
          settle.reject(reason);
          await run.catch(() => undefined);
        },
      });
      return outcome;
    });
    run.then(
      () => {
        if (!claimed) resolve({ kind: 'answered' });
      },
      (error: unknown) => {
        if (!claimed) reject(error);
      },
    );
  });
}
