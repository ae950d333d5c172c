import type { OncelyLogger } from '../core/observer.js';

/**
 * Reports one failed handler or consumer execution: to `logger.error(fields, message)` when the app
 * configured a structured logger, else as one line on stderr. A failure is never silent: the
 * client or sender sees only a status, the person running the host needs the why.
 * @example logFailure(config.logger, 'consumer failed', 'consumer shop/order.paid, event evt_1, attempt 2 of 8', { source: 'shop' }, error)
 */
export function logFailure(
  logger: OncelyLogger | undefined,
  message: string,
  where: string,
  fields: Record<string, unknown>,
  error: unknown,
): void {
  const text = errorText(error);
  if (logger) logger.error({ ...fields, error: text }, message);
  else process.stderr.write(`oncely: ${message}: ${where}: ${text}\n`);
}

/** `Name CODE: message` of an error, on one line. */
export function errorText(error: unknown): string {
  const text =
    error instanceof Error
      ? `${error.name}${'code' in error && error.code ? ` ${String(error.code)}` : ''}: ${error.message}`
      : String(error);
  return text.replace(/\s*\n\s*/g, ' ');
}
