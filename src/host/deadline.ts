import { type Duration, toMs } from '../core/duration.js';
import { ERRORS, OncelyError } from '../core/errors.js';
import type { Sql } from '../db/types.js';

/**
 * PostgreSQL: bounds each statement of the current transaction (parameter: milliseconds as text),
 * so a statement still running when its code's time is up ends soon after and frees the connection.
 */
export const STATEMENT_TIMEOUT = "set_config('statement_timeout', ?, true)";

/** How long a handler or consumer may run when neither it nor the config says: 30 s. */
export const DEFAULT_TIMEOUT_MS = 30_000;

/** The timeout of one module: its own `timeout`, else the config's, else 30 s. */
export function timeoutMs(own: Duration | undefined, configured: Duration | undefined): number {
  const ms = toMs(own ?? configured ?? DEFAULT_TIMEOUT_MS, 'timeout');
  if (ms <= 0) throw new OncelyError('INVALID_ARGUMENT', 'timeout must be positive');
  return ms;
}

/** The error of a handler or consumer that ran past its timeout; its transaction rolls back. */
export function timeoutError(what: string, ms: number): OncelyError {
  return Object.assign(new OncelyError('HANDLER_TIMEOUT', `${what} ran longer than its timeout of ${ms} ms`), {
    status: ERRORS.HANDLER_TIMEOUT.status,
  });
}

/**
 * Runs app code on its transaction for at most `ms`. The code gets a view of `tx` that refuses
 * every statement once the time is up: the code keeps running in the background (a promise
 * cannot be stopped), and its late writes must not land in whatever the connection does next
 * (on SQLite: outside any transaction; on PostgreSQL: another request's transaction). Callers
 * on PostgreSQL also set STATEMENT_TIMEOUT, for a statement already running at the deadline.
 */
export async function withinTimeout<T>(tx: Sql, ms: number, what: string, fn: (tx: Sql) => Promise<T>): Promise<T> {
  let ended: OncelyError | undefined;
  const guarded: Sql = {
    dialect: tx.dialect,
    handle: tx.handle,
    all: (sql, params) => (ended ? Promise.reject(ended) : tx.all(sql, params)),
    run: (sql, params) => (ended ? Promise.reject(ended) : tx.run(sql, params)),
  };
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      ended = timeoutError(what, ms);
      reject(ended);
    }, ms);
  });
  try {
    return await Promise.race([fn(guarded), late]);
  } finally {
    clearTimeout(timer);
    // The transaction ends right after this: a statement the code did not await must not run on it.
    ended ??= new OncelyError('INVALID_ARGUMENT', `${what} used its transaction after it returned`);
  }
}
