/**
 * oncely as a registry user gets it: `npm pack`, installed into an empty folder alone (commander
 * only: no native module, no install script, a few MB), every entry point imported with nothing
 * else, then beside ioredis, then the README's first commands (`oncely init` installs what `oncely
 * serve` needs), a scaffolded app served and replayed, every entry point imported with its peer,
 * and a user file type-checked under both module resolutions. Catches the next dependency that
 * only a devDependency happened to provide. One folder serves every step, in this order.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { until } from '../support/wait.js';
import { describeFootprint, footprint, PKG, packedWorkspace, type Workspace } from './packed.js';

/** Entry points and the peer each needs to import; `null`: a bare `npm i oncely` suffices. */
const ENTRIES: Record<string, string | null> = {
  oncely: null,
  'oncely/sqlite': null, // better-sqlite3 is imported when the store opens its file
  'oncely/postgres': null, // pg is imported when a store connects
  'oncely/redis': null, // ioredis likewise
  'oncely/express': null, // types only; the app brings express
  'oncely/fastify': null,
  'oncely/hono': 'hono', // its users have hono
  'oncely/host': null, // hono, @hono/node-server and tsx are imported when a host is built or an app loaded
  'oncely/flows': null,
  'oncely/db': null,
  'oncely/agent': null,
  'oncely/agent/mcp': 'zod',
  'oncely/agent/ai-sdk': 'ai',
  'oncely/prometheus': null, // prom-client is loaded for its global registry only
  'oncely/brokers': null, // each broker's client is imported when its source or target connects
  'oncely/fetch': null,
  'oncely/koa': null, // types only; the app brings koa
  'oncely/nestjs': '@nestjs/core', // with @nestjs/common, rxjs and reflect-metadata, as any Nest app has
  'oncely/client': null,
  'oncely/mysql': null, // mysql2 is imported when the store opens its own pool
  'oncely/dashboard': null, // hono when it is built, @hono/node-server when Express or Fastify mounts it
  'oncely/testing': null,
  'oncely/agent/openai-agents': '@openai/agents',
  'oncely/agent/langchain': '@langchain/core',
};
/** What a user installs beside oncely to use every entry point (and to type-check with tsc). */
const PEERS = [
  'pg',
  'ioredis',
  'express',
  'fastify',
  'zod',
  'ai',
  '@modelcontextprotocol/sdk',
  '@nestjs/common',
  '@nestjs/core',
  'rxjs',
  'reflect-metadata',
  '@openai/agents',
  '@langchain/core',
];
// ai's own declarations import json-schema's types, which it leaves to the app.
const TYPES = ['typescript', '@types/node', '@types/express', '@types/pg', '@types/json-schema'];

const timings: string[] = [];
let ws: Workspace;
beforeAll(async () => {
  const started = Date.now();
  ws = await packedWorkspace();
  timings.push(`pack + install ${Date.now() - started} ms`);
}, 300_000);
afterAll(() => console.log(`packed install: ${timings.join(', ')}`));

const timed = async <T>(label: string, fn: () => Promise<T>): Promise<T> => {
  const started = Date.now();
  try {
    return await fn();
  } finally {
    timings.push(`${label} ${Date.now() - started} ms`);
  }
};

describe('oncely installed from its tarball', () => {
  it('installs alone: at most 3 packages besides oncely, at most 8 MB, no native module, no install script', () => {
    const alone = footprint(ws.dir);
    console.log(describeFootprint('oncely alone', alone, ['oncely']));
    expect(alone.packages.filter((p) => !p.startsWith('oncely@')).length).toBeLessThanOrEqual(3);
    expect(alone.bytes).toBeLessThanOrEqual(8e6);
    expect(alone.native).toEqual([]);
    expect(alone.scripts).toEqual([]);
    // npm 11 names every install script it would run (prepare too, for a tarball): none.
    expect(ws.installed).not.toMatch(/install-scripts/);
    const installed = JSON.parse(readFileSync(join(ws.dir, 'node_modules/oncely/package.json'), 'utf8')) as {
      scripts: Record<string, string>;
    };
    for (const script of ['preinstall', 'install', 'postinstall', 'prepare'])
      expect(installed.scripts).not.toHaveProperty(script);
  });

  it('lists every entry point of package.json', () => {
    expect(Object.keys(ENTRIES).sort()).toEqual(
      Object.keys(PKG.exports)
        .map((e) => (e === '.' ? 'oncely' : `oncely/${e.slice(2)}`))
        .sort(),
    );
  });

  it('imports every entry point that needs no peer with nothing else installed; a use that needs one names its install line', async () => {
    const bare = Object.keys(ENTRIES).filter((e) => ENTRIES[e] === null);
    // Then the first use of each peer: its own line, the package and how to install it.
    const script = `${bare.map((e) => `await import(${JSON.stringify(e)});`).join('\n')}
const say = (e) => console.log(e.code, e.message);
const { sqliteStore } = await import('oncely/sqlite');
await sqliteStore({ path: ':memory:' }).migrate().catch(say);
await (await import('oncely/db')).openDb(':memory:').catch(say);
try { (await import('oncely/prometheus')).registerMetrics(); } catch (e) { say(e); }
await (await import('oncely/dashboard')).dashboard({ url: ':memory:' })(new Request('http://localhost/oncely/')).catch(say);`;
    const { stdout } = await ws.run('node', ['--input-type=module', '-e', script]);
    expect(stdout.trim().split('\n')).toEqual([
      "PACKAGE_MISSING the SQLite store needs 'better-sqlite3': npm install better-sqlite3@12",
      "PACKAGE_MISSING a SQLite database needs 'better-sqlite3': npm install better-sqlite3@12",
      "PACKAGE_MISSING registerMetrics needs 'prom-client': npm install prom-client",
      "PACKAGE_MISSING the dashboard needs 'hono': npm install hono",
    ]);
    // The CLI parser is oncely's one dependency: --help and --version answer from a bare install.
    const help = await ws.run('npx', ['oncely', '--help']);
    for (const command of ['demo', 'init', 'serve', 'migrate', 'sign', 'events', 'flows'])
      expect(help.stdout).toMatch(new RegExp(`^  ${command} .*\\S`, 'm'));
    expect((await ws.run('npx', ['oncely', '--version'])).stdout.trim()).toBe(PKG.version);
    await expect(ws.run('npx', ['oncely', 'demo'])).rejects.toThrow(
      "oncely: oncely demo needs 'better-sqlite3': npm install better-sqlite3@12",
    );
    await expect(ws.run('npx', ['oncely', 'serve', 'my-app'])).rejects.toThrow(
      "oncely: the host needs 'tsx' and 'hono' and '@hono/node-server': npm install tsx hono @hono/node-server",
    );
  });

  it('installs beside ioredis with no native module and no install script', async () => {
    const added = await ws.run('npm', [
      'install',
      '--prefer-offline',
      '--no-audit',
      '--no-fund',
      `ioredis@${PKG.devDependencies.ioredis}`,
    ]);
    const beside = footprint(ws.dir);
    console.log(describeFootprint('oncely beside ioredis', beside, ['oncely', 'ioredis']));
    expect(beside.native).toEqual([]);
    expect(beside.scripts).toEqual([]);
    expect(`${added.stdout}${added.stderr}`).not.toMatch(/install-scripts/);
  });

  it('scaffolds an app with init, serves it, answers one request and replays it; SIGTERM through npx stops it', async () => {
    // The README's first command: init scaffolds, then installs what serve needs beside oncely.
    const init = await timed('init', () => ws.run('npx', ['oncely', 'init', 'my-app']));
    expect(init.stdout).toContain('created my-app/oncely.config.ts');
    expect(init.stdout).toContain(
      'installing what oncely serve needs: npm install better-sqlite3@12 hono@4 @hono/node-server@2 tsx@4 prom-client@15',
    );
    console.log(describeFootprint('after oncely init', footprint(ws.dir), ['oncely', 'ioredis']));
    await expect(ws.run('npx', ['oncely', 'init', 'my-app'])).rejects.toThrow(/already exist.*overwrites nothing/);

    const server = ws.start('npx', ['oncely', 'serve', 'my-app', '--port', '0']);
    const banner = await timed('serve start', () => server.line(/^oncely serving my-app on /));
    const base = banner.match(/http:\/\/localhost:\d+/)?.[0];
    expect(base).toBeDefined();
    const curl = await server.line(/curl .*\/v1\/invoke\/orders\.create/);
    expect(curl).toMatch(/-H 'Idempotency-Key: [^']+'/);
    await server.line(/^stop with Ctrl-C or SIGTERM/);

    // The printed curl line, run twice: answered once, then replayed.
    const first = await ws.run('sh', ['-c', `${curl.trim()} -i`]);
    const second = await ws.run('sh', ['-c', `${curl.trim()} -i`]);
    expect(first.stdout).toMatch(/^HTTP\/1\.1 200/);
    expect(first.stdout).not.toMatch(/idempotent-replayed/i);
    expect(second.stdout).toMatch(/idempotent-replayed: true/i);
    const body = (out: string) => JSON.parse(out.slice(out.indexOf('\r\n\r\n') + 4));
    const [one, two] = [body(first.stdout), body(second.stdout)];
    expect(one).toMatchObject({ code: 0, data: { orderId: 'ORD-1', status: 'created' } });
    // The replay is the stored answer, byte for byte (README "Getting started"); the header names this request.
    const bytes = (out: string) => out.slice(out.indexOf('\r\n\r\n'));
    expect(bytes(second.stdout)).toBe(bytes(first.stdout));
    expect(two).toEqual(one);
    // init installed prom-client: the host's metrics count the two calls.
    const metrics = await (await fetch(`${base}/metrics`)).text();
    expect(metrics).toMatch(
      /oncely_calls_total\{surface="handler",action="POST orders\.create",outcome="executed"\} 1/,
    );
    expect(metrics).toMatch(
      /oncely_calls_total\{surface="handler",action="POST orders\.create",outcome="replayed"\} 1/,
    );

    // The dashboard from the package alone (src/ is not shipped): its page and the modules it loads.
    expect(await (await fetch(`${base}/oncely/`)).text()).toContain('<script type="module" src="app.js">');
    for (const module of ['app.js', 'api.js'])
      expect((await fetch(`${base}/oncely/${module}`)).headers.get('content-type')).toContain('text/javascript');

    // A signed webhook from `oncely sign`, delivered twice: accepted, then a duplicate.
    const event = '{"type":"payment.succeeded","data":{"orderId":"ORD-1","amountCents":4200}}';
    const signed = await ws.run('npx', [
      'oncely',
      'sign',
      'payments',
      event,
      '--id',
      'evt_1',
      '--dir',
      'my-app',
      '--url',
      base ?? '',
    ]);
    expect(JSON.parse((await ws.run('sh', ['-c', signed.stdout.trim()])).stdout).data.outcome).toBe('accepted');
    expect(JSON.parse((await ws.run('sh', ['-c', signed.stdout.trim()])).stdout).data.duplicate).toBe(true);
    const index = (await (await fetch(`${base}/`)).json()) as { data: { handlers: { id: string }[] } };
    expect(index.data.handlers.map((h) => h.id)).toEqual(['orders.create']);

    // As a container runtime stops `npx oncely serve`: SIGTERM to npx, which passes it to its shell.
    server.child.kill('SIGTERM');
    await until(
      'the served app to stop answering after SIGTERM',
      () =>
        fetch(`${base}/v1/health`).then(
          () => 'answering',
          () => 'stopped',
        ),
      (state) => state === 'stopped',
    );
    await until(
      'the serve to say it stops',
      () => server.output(),
      (out) => out.includes('stopping: finishing in-flight work'),
    );
    await expect(fetch(`${base}/v1/health`)).rejects.toThrow();

    // init installed the SQLite driver: the demo runs now.
    const demo = await timed('demo', () => ws.run('npx', ['oncely', 'demo']));
    expect(demo.stdout).toContain('SMS sent: 1. Ledger lines: 1. Executed once, replayed 2 times.');
  });

  it('imports every entry point with its peer, and a user file type-checks under node16 and bundler resolution', async () => {
    const wanted = [...PEERS, ...TYPES].map((p) => `${p}@${PKG.devDependencies[p] ?? 'latest'}`);
    await timed('peer install', () =>
      ws.run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', ...wanted]),
    );
    const script = Object.keys(ENTRIES)
      .map((e) => `await import(${JSON.stringify(e)});`)
      .join('\n');
    await ws.run('node', ['--input-type=module', '-e', script]);

    // .mts: oncely is ESM only, and the folder's package.json (npm's default) says nothing. The two
    // checks read separate files, so they run side by side.
    await Promise.all(
      (['node16', 'bundler'] as const).map((resolution) => {
        // @openai/agents' own declarations fail under node16 (TS1542 in @openai/agents-openai, a type
        // import of an ES module from CommonJS) with or without oncely: its adapter is checked under
        // bundler resolution, where the SDK's types load.
        const user =
          resolution === 'node16'
            ? USER_FILE.replace(/^import \{ toOpenAiAgentsTools \}.*\n/m, '').replace(' toOpenAiAgentsTools,', '')
            : USER_FILE;
        const file = `user.${resolution}.mts`;
        writeFileSync(join(ws.dir, file), user);
        const module = resolution === 'node16' ? 'node16' : 'esnext';
        const tsconfig = `tsconfig.${resolution}.json`;
        writeFileSync(
          join(ws.dir, tsconfig),
          JSON.stringify({
            compilerOptions: {
              module,
              moduleResolution: resolution,
              target: 'es2022',
              strict: true,
              noEmit: true,
              types: ['node'],
              // As bundler apps' own configs have it (Vite's and Next's templates): their file is
              // checked against oncely's types; the node16 check reads every declaration in full.
              ...(resolution === 'bundler' ? { skipLibCheck: true } : {}),
            },
            files: [file],
          }),
        );
        return timed(`tsc ${resolution}`, () => ws.run('npx', ['tsc', '-p', tsconfig]));
      }),
    );
  }, 300_000);
});

/** A user's file touching every entry point's main export, compiled against the published types. */
const USER_FILE = `import { createOncely, keyFrom, OncelyError, type RunResult } from 'oncely';
import { createAgentRuntime, defineTool } from 'oncely/agent';
import { toAiSdkTools } from 'oncely/agent/ai-sdk';
import { registerTools } from 'oncely/agent/mcp';
import { type Db, openDb } from 'oncely/db';
import { idempotency as expressIdempotency } from 'oncely/express';
import { idempotency as fastifyIdempotency } from 'oncely/fastify';
import { createFlows, defineFlow } from 'oncely/flows';
import { createClient, idempotentFetch } from 'oncely/client';
import { idempotent } from 'oncely/fetch';
import { idempotency as honoIdempotency } from 'oncely/hono';
import { defineConfig, env, type HostContext, type HostEvent, openHost } from 'oncely/host';
import { postgresStore } from 'oncely/postgres';
import { redisStore } from 'oncely/redis';
import { sqliteStore } from 'oncely/sqlite';
import { mysqlStore } from 'oncely/mysql';
import { dashboard } from 'oncely/dashboard';
import { faultProxy, manualClock, storm } from 'oncely/testing';
import { toOpenAiAgentsTools } from 'oncely/agent/openai-agents';
import { toLangChainTools } from 'oncely/agent/langchain';

const once = await createOncely({ store: sqliteStore({ path: ':memory:' }), tenant: 'acme' });
const r: RunResult<{ charged: number }> = await once.run(
  { action: 'charge', key: keyFrom('ORD-1', 'charge'), input: { amount: 42 } },
  async (ctx) => ({ charged: ctx.attempt }),
);
const replayed: boolean = r.replayed;
const db: Db = await openDb(':memory:');
export const config = defineConfig({ sources: { shop: { kind: 'standard-webhooks', secret: env('S', 'whsec_x') } } });
export async function handle(event: HostEvent, ctx: HostContext): Promise<string> {
  return \`\${event.id} \${ctx.idempotencyKey ?? ''}\`;
}
export const used = [replayed, db, OncelyError, createAgentRuntime, defineTool, toAiSdkTools, registerTools, expressIdempotency,
  fastifyIdempotency, createFlows, defineFlow, honoIdempotency, openHost, postgresStore, redisStore, createClient,
  idempotentFetch, idempotent, mysqlStore, dashboard, faultProxy, manualClock, storm, toOpenAiAgentsTools, toLangChainTools];
`;
