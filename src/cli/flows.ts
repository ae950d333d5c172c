import { existsSync } from 'node:fs';
import type { Command } from 'commander';
import { type ErrorCode, OncelyError } from '../core/errors.js';
import type { FlowRecord, Flows } from '../flows/flows.js';
import { appDir, withDir } from './dir.js';
import { dbOption, type HostOptions, host } from './host-commands.js';

interface ListFlags extends HostOptions {
  status?: FlowRecord['status'];
  limit: string;
  json?: boolean;
}

const STATUSES: readonly string[] = ['pending', 'running', 'waiting', 'completed', 'failed', 'cancelled'];

/**
 * Adds `flows list|show|retry|cancel` to the CLI. With `--db` they work on that database alone, no
 * app folder loaded (as `records` and `stats` do); without it, on the app's database. The app's
 * workers run what a retry makes runnable.
 */
export function addFlowCommands(program: Command): void {
  const flows = program
    .command('flows')
    .description('durable flows in a database (--db) or an app: list, show, retry, cancel');

  withDir(flows.command('list').description('flows, newest first, with their status, runs and error'))
    .argument('[dir]', 'app folder (default: .); not loaded when --db is given')
    .option(...dbOption)
    .option('--status <status>', STATUSES.join(', '))
    .option('--limit <n>', 'most flows listed, 1 to 10000', '100')
    .option('--json', 'print the flows as JSON')
    .action(async (arg: string | undefined, flags: ListFlags) => {
      if (flags.status !== undefined && !STATUSES.includes(flags.status))
        throw new OncelyError('INVALID_ARGUMENT', `--status ${flags.status} is not one of ${STATUSES.join(', ')}`);
      const limit = Number(flags.limit);
      if (!Number.isSafeInteger(limit) || limit < 1 || limit > 10_000)
        throw new OncelyError('INVALID_ARGUMENT', `--limit ${flags.limit} is not a whole number from 1 to 10000`);
      const listed = await withFlows(arg, flags, (api) => api.list({ status: flags.status, limit }));
      if (flags.json) console.log(JSON.stringify(listed, null, 2));
      else
        for (const f of listed)
          console.log(
            `${f.workflowId}\t${f.status}\truns ${f.runs}\t${f.error ? `${f.error.code}: ${f.error.message}` : ''}`,
          );
    });

  withDir(
    flows.command('show').description('one flow as JSON: input, steps (attempts, last error, run), signals, result'),
  )
    .argument('<workflowId>')
    .option(...dbOption)
    .action(async (workflowId: string, flags: HostOptions) => {
      const shown = await withFlows(undefined, flags, (api) => api.show(workflowId));
      if (!shown) throw new OncelyError('NOT_FOUND', `no flow ${workflowId}`);
      console.log(JSON.stringify(shown, null, 2));
    });

  withDir(flows.command('retry').description('resume a failed flow from its failed step'))
    .argument('<workflowId>')
    .option(...dbOption)
    .action(async (workflowId: string, flags: HostOptions) => {
      const changed = await withFlows(undefined, flags, async (api) =>
        (await api.retry(workflowId))
          ? true
          : refusal(workflowId, await api.get(workflowId), 'FLOW_NOT_RETRYABLE', 'only a failed flow is retried'),
      );
      if (changed !== true) throw changed;
      console.log(`${workflowId} resumes from its failed step`);
    });

  withDir(
    flows
      .command('cancel')
      .description('cancel a pending or waiting flow: it never runs again, nothing is compensated'),
  )
    .argument('<workflowId>')
    .option(...dbOption)
    .action(async (workflowId: string, flags: HostOptions) => {
      const changed = await withFlows(undefined, flags, async (api) =>
        (await api.cancel(workflowId))
          ? true
          : refusal(
              workflowId,
              await api.get(workflowId),
              'FLOW_NOT_CANCELLABLE',
              'only a pending or waiting flow is cancelled',
            ),
      );
      if (changed !== true) throw changed;
      console.log(`${workflowId} is cancelled`);
    });
}

/** Why a retry or cancel changed nothing: no such flow, or its status, as the admin API answers. */
function refusal(workflowId: string, flow: FlowRecord | null, code: ErrorCode, rule: string): OncelyError {
  if (!flow) return new OncelyError('NOT_FOUND', `no flow ${workflowId}`);
  return new OncelyError(code, `flow ${workflowId} is ${flow.status}: ${rule}`);
}

/** Runs `fn` on the flows of `--db`, or of the app folder's database; closes what it opened. */
async function withFlows<T>(dir: string | undefined, flags: HostOptions, fn: (flows: Flows) => Promise<T>): Promise<T> {
  if (flags.db !== undefined) return onDatabase(flags.db, fn);
  const app = await host(appDir(dir, flags), flags);
  try {
    if (!app.flows) throw new OncelyError('FLOWS_UNAVAILABLE', `${appDir(dir, flags)} has no flows/ folder`);
    return await fn(app.flows);
  } finally {
    await app.stop();
  }
}

/** The flows of a database given by `--db` (a SQLite path or a postgres:// URL, `?schema=` as openDb takes it). */
async function onDatabase<T>(target: string, fn: (flows: Flows) => Promise<T>): Promise<T> {
  // Opening a missing SQLite path would create an empty file: a typo must not leave one behind.
  if (!/^postgres(ql)?:\/\//.test(target) && !existsSync(target))
    throw new OncelyError('INVALID_ARGUMENT', `no database at ${target}`);
  const [{ openDb }, { createFlows }] = await Promise.all([import('../db/index.js'), import('../flows/flows.js')]);
  const db = await openDb(target, { poolSize: 1 });
  try {
    // A database no host made flows in is named as such, rather than given flow tables by a listing.
    await db.all('SELECT 1 FROM oncely_flows LIMIT 1').catch((error: unknown) => {
      throw new OncelyError('NOT_MIGRATED', `no oncely flows in ${target}: run oncely migrate or serve on it first`, {
        cause: error,
      });
    });
    // No worker: this process only reads and changes rows; the app's workers run the flows.
    return await fn(await createFlows({ db, flows: [], metrics: false }));
  } finally {
    await db.close();
  }
}
