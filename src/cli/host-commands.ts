import type { Command } from 'commander';
import { OncelyError } from '../core/errors.js';
import { loadPeer } from '../core/peer.js';
import type { Host } from '../host/host.js';
import { appDir, withDir } from './dir.js';

export interface HostOptions {
  dir?: string;
  db?: string;
  poolSize?: string;
}

/** Apps are TypeScript folders: their files load through tsx, registered only by commands that load an app. */
export async function host(dir: string, options: HostOptions): Promise<Host> {
  // All that a bare `npm i oncely` lacks for an app, in one line (`oncely init` installs it), not one package a try.
  await loadPeer(() => Promise.all([import('tsx/esm/api'), import('hono'), import('@hono/node-server')]), 'the host', [
    'tsx',
    'hono',
    '@hono/node-server',
  ]);
  const [{ registerAppLoader }, { openHost }] = await Promise.all([
    import('./app-loader.js'),
    import('../host/open.js'),
  ]);
  await registerAppLoader();
  const poolSize = options.poolSize === undefined ? undefined : Number(options.poolSize);
  if (poolSize !== undefined && (!Number.isSafeInteger(poolSize) || poolSize < 1))
    throw new OncelyError(
      'INVALID_ARGUMENT',
      `--pool-size ${options.poolSize} is not a positive whole number of connections`,
    );
  return openHost(dir, options.db, { poolSize });
}

export const dbOption = [
  '--db <target>',
  'SQLite file or postgres:// URL (default: the app config, else <dir>/.oncely/app.db)',
] as const;

/** Adds `migrate`, `serve`, `stats`, `sign` and `events dead list|replay` to the CLI. */
export function addHostCommands(program: Command): void {
  withDir(program.command('migrate').description("apply oncely's tables and the app's schema.sql"))
    .argument('[dir]', 'app folder (default: .)')
    .option(...dbOption)
    .action(async (arg: string | undefined, options: HostOptions) => {
      const dir = appDir(arg, options);
      const app = await host(dir, options);
      await app.stop();
      console.log(`migrated ${dir}`);
    });

  withDir(program.command('serve').description('serve an app: handlers, webhooks, consumers and the outbox relay'))
    .argument('[dir]', 'app folder (default: .)')
    .option(...dbOption)
    .option('--port <port>', 'port to listen on', process.env.PORT ?? '3000')
    .option('--pool-size <n>', 'PostgreSQL connections of this process (default: the app config, else 10)')
    .action(async (arg: string | undefined, options: HostOptions & { port: string }) => {
      const dir = appDir(arg, options);
      const port = Number(options.port);
      if (!Number.isInteger(port) || port < 0 || port > 65_535)
        throw new OncelyError('INVALID_ARGUMENT', `--port ${options.port} is not a port number (0 to 65535)`);
      const app = await host(dir, options);
      let listening: number;
      try {
        listening = await app.start(port);
      } catch (error) {
        await app.stop().catch(() => undefined);
        throw error;
      }
      const { serveBanner } = await import('./serve-banner.js');
      console.log(serveBanner(app.routes(`http://localhost:${listening}`, dir), dir));
      const stop = () => {
        console.log('stopping: finishing in-flight work');
        app.stop().then(
          () => process.exit(0),
          () => process.exit(1),
        );
      };
      process.once('SIGTERM', stop);
      process.once('SIGINT', stop);
      // npx passes SIGTERM to the `sh -c` it starts, and sh dies without passing it on: under npx,
      // the shell going away (this process handed to a new parent) is the SIGTERM.
      if (process.env.npm_command === 'exec') {
        const parent = process.ppid;
        const watch = setInterval(() => {
          if (process.ppid === parent) return;
          clearInterval(watch);
          stop();
        }, 250);
        watch.unref();
      }
    });

  withDir(
    program
      .command('stats')
      .description("an app database's totals and the four rates with their targets, over every process and restart"),
  )
    .argument('[dir]', 'app folder (default: .); not loaded when --db is given')
    .option(...dbOption)
    .option('--json', 'print the totals and rates as JSON')
    .action(async (arg: string | undefined, options: HostOptions & { json?: boolean }) => {
      const { readStats, statsOutput } = await import('./stats.js');
      let stats: Awaited<ReturnType<typeof readStats>>;
      if (options.db !== undefined) stats = await readStats(options.db);
      else {
        const app = await host(appDir(arg, options), options);
        try {
          stats = await app.stats();
        } finally {
          await app.stop();
        }
      }
      console.log(statsOutput(stats, options.json));
    });

  withDir(program.command('sign').description('print a signed curl line that delivers one webhook to a source'))
    .argument('<source>', 'webhook source name in oncely.config.ts')
    .argument('[body]', 'JSON body of the event', '{"type":"test"}')
    .option('--id <id>', 'event id (default: a new one)')
    .option('--url <url>', 'where the app is served', `http://localhost:${process.env.PORT ?? '3000'}`)
    .action(async (source: string, body: string, options: { dir?: string; id?: string; url: string }) => {
      const { signCommand } = await import('./sign.js');
      console.log(await signCommand(appDir(undefined, options), source, body, options));
    });

  const dead = program
    .command('events')
    .description('event intake: dead letters')
    .command('dead')
    .description('dead-lettered events: list them, or send them back to their consumers');
  withDir(dead.command('list').description('dead letters as <source>/<eventId>, with type, attempts and last error'))
    .argument('[dir]', 'app folder (default: .)')
    .option(...dbOption)
    .action(async (arg: string | undefined, options: HostOptions) => {
      const app = await host(appDir(arg, options), options);
      const letters = await app.events.deadLetters();
      for (const d of letters)
        console.log(`${d.source}/${d.eventId}\t${d.type}\tattempts ${d.attempts}\t${d.lastError ?? ''}`);
      console.log(`${letters.length} dead letter(s)`);
      await app.stop();
    });
  withDir(dead.command('replay').description('put dead letters back to pending, with their original event ids'))
    .argument('[ids...]', 'dead letters as <source>/<eventId>')
    .option('--all', 'replay every dead letter')
    .option(...dbOption)
    .action(async (ids: string[], options: HostOptions & { all?: boolean }) => {
      if (!options.all && ids.length === 0)
        throw new OncelyError('INVALID_ARGUMENT', 'name dead letters as <source>/<eventId>, or pass --all');
      const targets = ids.map((id) => {
        const slash = id.indexOf('/');
        if (slash <= 0) throw new OncelyError('INVALID_ARGUMENT', `${id} is not <source>/<eventId>`);
        return { source: id.slice(0, slash), id: id.slice(slash + 1) };
      });
      const app = await host(appDir(undefined, options), options);
      const replayed = await app.events.replay(options.all ? 'all' : targets);
      console.log(`replayed ${replayed} event(s) with their original ids; the next serve processes them`);
      await app.stop();
    });
}
