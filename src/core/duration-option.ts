import { type Duration, toMs } from './duration.js';
import { OncelyError } from './errors.js';

/** The code a bad duration option is refused with: INVALID_ARGUMENT in code, CONFIG_INVALID in `oncely.config.ts`. */
export type DurationOptionCode = 'INVALID_ARGUMENT' | 'CONFIG_INVALID';

/** The release that drops the deprecated `...Ms` names. */
export const MS_NAMES_REMOVED_IN = '0.2.0';

// Old names already warned about, shared through the global registry so that two loaded copies of
// oncely (the sources and dist, or two installed versions) still warn once per process.
const registry = globalThis as Record<symbol, Set<string> | undefined>;
const WARNED_KEY = Symbol.for('oncely.deprecatedNamesWarned');
const WARNED = registry[WARNED_KEY] ?? new Set<string>();
registry[WARNED_KEY] = WARNED;

/**
 * Reads the duration option `name` of `options` in milliseconds: `name` itself (a Duration), else
 * its deprecated milliseconds name `old` (one DeprecationWarning per old name per process), else
 * `fallback`. Both given with different values, or a value that is no duration, is refused with
 * `code`, the message naming `where` and the option.
 * @example const leaseMs = durationOption(options, 'lease', 'leaseMs', '30s', 'outbox relay');
 */
export function durationOption<O extends object>(
  options: O,
  name: keyof O & string,
  old: keyof O & `${string}Ms`,
  fallback: Duration,
  where: string,
  code: DurationOptionCode = 'INVALID_ARGUMENT',
): number {
  const given = options[name] as unknown;
  const legacy = options[old] as unknown;
  if (legacy == null) return convert(given ?? fallback, `${where}: ${name}`, code);
  warnOnce(old, name, where);
  const ms = convert(legacy, `${where}: ${old}`, code);
  if (given != null && convert(given, `${where}: ${name}`, code) !== ms)
    throw new OncelyError(code, `${where}: ${name} and its old name ${old} are both given, with different values`);
  return ms;
}

function convert(value: unknown, what: string, code: DurationOptionCode): number {
  try {
    return toMs(value as Duration, what);
  } catch (error) {
    if (code === 'INVALID_ARGUMENT') throw error;
    throw new OncelyError(code, (error as Error).message);
  }
}

function warnOnce(old: string, name: string, where: string): void {
  if (WARNED.has(old)) return;
  WARNED.add(old);
  const message = `${where}: ${old} is deprecated and goes in oncely ${MS_NAMES_REMOVED_IN}; write ${name} instead ('30s', or milliseconds)`;
  const code = `ONCELY_DEP_${old.replace(/[A-Z]/g, (c) => `_${c}`).toUpperCase()}`;
  // The client runs in browsers too, where there is no process to warn through.
  if (typeof globalThis.process?.emitWarning === 'function')
    globalThis.process.emitWarning(message, { type: 'DeprecationWarning', code });
  else console.warn(`DeprecationWarning [${code}]: ${message}`);
}
