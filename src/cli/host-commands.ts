import type { Command } from 'commander';
import { register } from 'tsx/esm/api';
import { openHost } from '../host/open.js';

interface HostOptions {
  db?: string;
}

/** Apps are TypeScript folders: their files are loaded through tsx. */
async function host(dir: string, options: HostOptions) {
  register();
  return openHost(dir, options.db);
}

/** Adds `migrate`, `serve` and `events dead list|replay` to the CLI. */
export function addHostCommands(program: Command): void {
  const db = [
    '--db <target>',
    'SQLite file or postgres:// URL (default: the app config, else <dir>/.oncely/app.db)',
  ] as const;

  program
    .command('migrate')
    .description("apply oncely's tables and the app's schema.sql")
    .argument('[dir]', 'app folder', '.')
    .option(...db)
    .action(async (dir: string, options: HostOptions) => {
      const app = await host(dir, options);
      await app.stop();
      console.log(`migrated ${dir}`);
    });

  program
    .command('serve')
    .description('serve an app: handlers, webhooks, consumers and the outbox relay')
    .argument('[dir]', 'app folder', '.')
    .option(...db)
    .option('--port <port>', 'port to listen on', process.env.PORT ?? '3000')
    .action(async (dir: string, options: HostOptions & { port: string }) => {
      const app = await host(dir, options);
      const port = await app.start(Number(options.port));
      console.log(`oncely serving ${dir} on http://localhost:${port}`);
      const stop = () => {
        console.log('stopping: finishing in-flight work');
        app.stop().then(
          () => process.exit(0),
          () => process.exit(1),
        );
      };
      process.once('SIGTERM', stop);
      process.once('SIGINT', stop);
    });

  const dead = program
    .command('events')
    .description('event intake')
    .command('dead')
    .description('dead-lettered events');
  dead
    .command('list')
    .argument('[dir]', 'app folder', '.')
    .option(...db)
    .action(async (dir: string, options: HostOptions) => {
      const app = await host(dir, options);
      const letters = await app.events.deadLetters();
      for (const d of letters)
        console.log(`${d.source}/${d.eventId}\t${d.type}\tattempts ${d.attempts}\t${d.lastError ?? ''}`);
      console.log(`${letters.length} dead letter(s)`);
      await app.stop();
    });
  dead
    .command('replay')
    .argument('[ids...]', 'dead letters as <source>/<eventId>')
    .option('--all', 'replay every dead letter')
    .option('--dir <dir>', 'app folder', '.')
    .option(...db)
    .action(async (ids: string[], options: HostOptions & { all?: boolean; dir: string }) => {
      if (!options.all && ids.length === 0) throw new Error('name dead letters as <source>/<eventId>, or pass --all');
      const app = await host(options.dir, options);
      const targets = ids.map((id) => {
        const slash = id.indexOf('/');
        if (slash <= 0) throw new Error(`${id} is not <source>/<eventId>`);
        return { source: id.slice(0, slash), id: id.slice(slash + 1) };
      });
      const replayed = await app.events.replay(options.all ? 'all' : targets);
      console.log(`replayed ${replayed} event(s) with their original ids; the next serve processes them`);
      await app.stop();
    });
}

/** Adds `flows list|show|retry` to the CLI: they read the app's database, the app's workers run the flows. */
export function addFlowCommands(program: Command): void {
  const flows = program.command('flows').description('durable flows of an app');
  const withFlows = async (dir: string, options: HostOptions) => {
    const app = await host(dir, options);
    if (!app.flows) {
      await app.stop();
      throw new Error(`${dir} has no flows/ folder`);
    }
    return { app, flows: app.flows };
  };
  flows
    .command('list')
    .argument('[dir]', 'app folder', '.')
    .option('--db <target>', 'SQLite file or postgres:// URL')
    .option('--status <status>', 'pending, running, waiting, completed or failed')
    .action(async (dir: string, options: HostOptions & { status?: 'failed' }) => {
      const { app, flows: api } = await withFlows(dir, options);
      for (const f of await api.list({ status: options.status }))
        console.log(`${f.workflowId}\t${f.status}\truns ${f.runs}\t${f.error?.message ?? ''}`);
      await app.stop();
    });
  flows
    .command('show')
    .argument('<workflowId>')
    .option('--dir <dir>', 'app folder', '.')
    .option('--db <target>', 'SQLite file or postgres:// URL')
    .action(async (workflowId: string, options: HostOptions & { dir: string }) => {
      const { app, flows: api } = await withFlows(options.dir, options);
      const shown = await api.show(workflowId);
      console.log(shown ? JSON.stringify(shown, null, 2) : `no flow ${workflowId}`);
      await app.stop();
    });
  flows
    .command('retry')
    .argument('<workflowId>')
    .option('--dir <dir>', 'app folder', '.')
    .option('--db <target>', 'SQLite file or postgres:// URL')
    .action(async (workflowId: string, options: HostOptions & { dir: string }) => {
      const { app, flows: api } = await withFlows(options.dir, options);
      console.log(
        (await api.retry(workflowId)) ? `${workflowId} resumes from its failed step` : `${workflowId} is not failed`,
      );
      await app.stop();
    });
}
