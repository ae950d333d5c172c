import { OncelyError } from './errors.js';

const NOT_FOUND = /^Cannot find (?:package|module) '([^']+)'/;

/** The package a failed import says is not installed; undefined for any other failure (a missing file of the app, a crash while loading). */
export function missingPackage(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  if (code !== 'ERR_MODULE_NOT_FOUND' && code !== 'MODULE_NOT_FOUND') return undefined;
  const name = NOT_FOUND.exec((error as Error).message)?.[1];
  if (name === undefined || /^(\.|\/|[a-z]:[\\/]|file:|node:)/i.test(name)) return undefined;
  // `mysql2/promise` is the package `mysql2`; `@nats-io/jetstream/x` is `@nats-io/jetstream`.
  return name
    .split('/')
    .slice(0, name.startsWith('@') ? 2 : 1)
    .join('/');
}

/** The one error for an optional package that `what` needs and the app has not installed. */
export function packageMissing(what: string, packages: readonly string[], cause?: unknown): OncelyError {
  const names = packages.map((name) => `'${name}'`).join(' and ');
  return new OncelyError('PACKAGE_MISSING', `${what} needs ${names}: npm install ${packages.join(' ')}`, { cause });
}

/**
 * Imports an optional peer package: one that is not installed fails with PACKAGE_MISSING and the
 * line that installs it; any other failure of its loading is thrown as it is.
 * @example const pg = await loadPeer(() => import('pg'), 'a postgres:// database', ['pg'])
 */
export async function loadPeer<T>(load: () => Promise<T>, what: string, packages: readonly string[]): Promise<T> {
  try {
    return await load();
  } catch (error) {
    const missing = missingPackage(error);
    if (missing !== undefined && packages.includes(missing)) throw packageMissing(what, packages, error);
    throw error;
  }
}
