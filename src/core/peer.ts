import { createRequire } from 'node:module';
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

/** The package an install spec names: `better-sqlite3@12` is `better-sqlite3`. */
const nameOf = (spec: string) => spec.replace(/(?!^)@.*$/, '');

/**
 * The one error for an optional package that `what` needs and the app has not installed. A spec
 * may carry the major to install (`better-sqlite3@12`) where the latest would not fit.
 */
export function packageMissing(what: string, packages: readonly string[], cause?: unknown): OncelyError {
  const names = packages.map((spec) => `'${nameOf(spec)}'`).join(' and ');
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
    if (missing !== undefined && packages.some((spec) => nameOf(spec) === missing))
      throw packageMissing(what, packages, error);
    throw error;
  }
}

// Resolves from oncely's own folder, as the dynamic imports of loadPeer do.
const require = createRequire(import.meta.url);

/**
 * Loads an optional peer at once, for the few synchronous calls that hand back the peer's own
 * object (prom-client's default registry, a Hono app); loadPeer, at the first asynchronous use,
 * is the rule. A missing package is PACKAGE_MISSING as there.
 */
export function requirePeer<T>(name: string, what: string): T {
  try {
    return require(name) as T;
  } catch (error) {
    if (missingPackage(error) === name) throw packageMissing(what, [name], error);
    throw error;
  }
}
