import { existsSync } from 'node:fs';
import { OncelyError } from '../core/errors.js';
import { Metrics } from '../core/metrics.js';
import { openDb } from '../db/index.js';
import { type HostStats, hostStats, statsJson, statsText } from '../host/stats.js';
import { Totals } from '../host/totals.js';

/**
 * The totals in a database given by `--db` (a SQLite path or a postgres:// URL), read without
 * loading an app: NOT_MIGRATED when no host has made its tables there yet.
 */
export async function readStats(target: string): Promise<HostStats> {
  // Opening a missing SQLite path would create an empty file: a typo must not leave one behind.
  if (!/^postgres(ql)?:\/\//.test(target) && !existsSync(target))
    throw new OncelyError('INVALID_ARGUMENT', `no database at ${target}`);
  const db = await openDb(target, { poolSize: 1 });
  try {
    return await hostStats(new Totals(db, new Metrics()));
  } catch (error) {
    if (OncelyError.is(error)) throw error;
    throw new OncelyError('NOT_MIGRATED', `no oncely totals in ${target}: run oncely migrate or serve on it first`, {
      cause: error,
    });
  } finally {
    await db.close();
  }
}

/** What `oncely stats` prints: a table of the four rates and the totals, or JSON with `--json`. */
export function statsOutput(stats: HostStats, json: boolean | undefined): string {
  return json ? statsJson(stats, 2) : statsText(stats);
}
