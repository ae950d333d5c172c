import { join } from 'node:path';
import { OncelyError } from '../core/errors.js';
import { openDb } from '../db/index.js';
import { loadApp } from './app.js';
import { createHost, type Host, type HostOptions } from './host.js';
import { recordStoreFor } from './records.js';

/**
 * Loads the app in `dir` and builds its host on `db` (a SQLite path or a postgres:// URL; default:
 * the app's config, else `<dir>/.oncely/app.db`; `poolSize`: PostgreSQL connections, default the
 * config's, else 10). Migrates before returning. A failure says which
 * part of the app to change, and leaves no connection open.
 * @example const host = await openHost('examples/shop'); await host.start(3000);
 */
export async function openHost(
  dir: string,
  db?: string,
  options: { poolSize?: number } & Pick<HostOptions, 'clock' | 'hooks'> = {},
): Promise<Host> {
  const app = await loadApp(dir).catch((error: unknown) => {
    // These name the file and what to change already; their code is what a caller matches on.
    if (OncelyError.is(error) && (error.code === 'CONFIG_KEY_UNKNOWN' || error.code === 'PACKAGE_MISSING')) throw error;
    throw new OncelyError('CONFIG_INVALID', `cannot load the app in ${dir}: ${oneLine(error)}`, { cause: error });
  });
  const database = await openDb(db ?? app.config.db ?? join(app.dir, '.oncely', 'app.db'), {
    poolSize: options.poolSize ?? app.config.poolSize,
  });
  let host: Host;
  try {
    host = await createHost(app, database, recordStoreFor(database), { clock: options.clock, hooks: options.hooks });
  } catch (error) {
    await database.close();
    throw error;
  }
  try {
    await host.migrate();
  } catch (error) {
    await host.stop().catch(() => undefined);
    if (OncelyError.is(error)) throw error;
    throw new OncelyError(
      'SCHEMA_INVALID',
      `migrating ${dir} failed: ${oneLine(error)} (fix ${join(dir, 'schema.sql')}; a failed schema applies nothing)`,
      { cause: error },
    );
  }
  return host;
}

/** The message on one line: a compiler's "failed with 1 error:" says what only with the line after it. */
function oneLine(error: unknown): string {
  return (error instanceof Error ? error.message : String(error)).trim().replace(/\s*\n\s*/g, ' ');
}
