/** `oncely serve` refusing to start: one line saying what to change, and a non-zero exit. */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const CLI = 'dist/cli/main.js';
const { version } = JSON.parse(readFileSync('package.json', 'utf8')) as { version: string };

/** An app folder with these files. */
function app(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), 'oncely-start-'));
  // As `oncely init` writes it: the app's TypeScript files are ES modules.
  writeFileSync(join(dir, 'package.json'), '{ "type": "module" }\n');
  for (const [name, text] of Object.entries(files)) {
    mkdirSync(join(dir, name, '..'), { recursive: true });
    writeFileSync(join(dir, name), text);
  }
  return dir;
}

/** Runs the built CLI, expecting it to fail; its stderr. */
async function refused(args: string[], env: Record<string, string> = {}): Promise<string> {
  const failed = await run(process.execPath, [CLI, ...args], { env: { ...process.env, ...env } }).then(
    () => undefined,
    (error: { code: number; stderr: string }) => error,
  );
  expect(failed, 'the command should fail').toBeDefined();
  expect(failed?.code).toBe(1);
  const lines = (failed?.stderr ?? '').trim().split('\n');
  expect(lines).toHaveLength(1);
  return lines[0] ?? '';
}

describe('oncely serve refuses to start with one clear line', () => {
  it('a config that throws (an unset environment variable)', async () => {
    const dir = app({
      'oncely.config.ts': `export default { sources: { s: { kind: 'standard-webhooks', secret: need('NOT_SET_SECRET') } } };
function need(name: string): string { const v = process.env[name]; if (!v) throw new Error(\`environment variable \${name} is not set\`); return v; }\n`,
    });
    expect(await refused(['serve', dir, '--port', '0'])).toBe(
      `oncely: cannot load the app in ${dir}: environment variable NOT_SET_SECRET is not set`,
    );
  });

  it('a config that does not compile', async () => {
    const dir = app({ 'oncely.config.ts': 'export default { sources: {\n' });
    expect(await refused(['serve', dir, '--port', '0'])).toMatch(
      new RegExp(`^oncely: cannot load the app in ${dir}: .*oncely\\.config\\.ts:\\d+:\\d+: ERROR: `),
    );
  });

  it('a webhook source whose secret is missing or empty', async () => {
    for (const secret of ['process.env.NOT_SET_SECRET', "''"]) {
      const dir = app({
        'oncely.config.ts': `export default { sources: { pay: { kind: 'standard-webhooks', secret: ${secret} } } };\n`,
      });
      expect(await refused(['serve', dir, '--port', '0'])).toMatch(/^oncely: .*"pay".*secret/);
    }
  });

  it('a schema.sql that fails', async () => {
    const dir = app({
      'schema.sql': 'CREATE TABLE IF NOT EXISTS t (id TEXT PRIMARY KEY);\nCREAT TABLE u (id TEXT);\n',
    });
    expect(await refused(['serve', dir, '--port', '0'])).toBe(
      `oncely: migrating ${dir} failed: near "CREAT": syntax error (fix ${join(dir, 'schema.sql')}; a failed schema applies nothing)`,
    );
  });

  it('a port in use', async () => {
    const blocker = createServer();
    const port = await new Promise<number>((resolve) =>
      blocker.listen(0, '0.0.0.0', () => resolve((blocker.address() as { port: number }).port)),
    );
    try {
      expect(await refused(['serve', app({}), '--port', String(port)])).toBe(
        `oncely: port ${port} is in use: stop what listens there, or pass --port <another port>`,
      );
    } finally {
      blocker.close();
    }
  });

  it('a port that is not a number, and two different app folders', async () => {
    expect(await refused(['serve', app({}), '--port', 'http'])).toBe(
      'oncely: --port http is not a port number (0 to 65535)',
    );
    expect(await refused(['migrate', 'a', '--dir', 'b'])).toBe(
      'oncely: two app folders given (a and --dir b); give one',
    );
  });
});

describe('oncely init', () => {
  it('scaffolds the app files and refuses to overwrite any of them', async () => {
    const dir = join(mkdtempSync(join(tmpdir(), 'oncely-init-')), 'my-app');
    const { stdout } = await run(process.execPath, [CLI, 'init', '--dir', dir]);
    // init names what it wrote relative to the current folder, wherever the clone lives.
    for (const file of [
      'oncely.config.ts',
      'schema.sql',
      'handlers/orders/create.ts',
      'README.md',
      '.gitignore',
      'package.json',
    ])
      expect(stdout).toContain(`created ${relative(process.cwd(), join(dir, file))}`);
    expect(await refused(['init', dir])).toMatch(/already exist.*oncely init overwrites nothing/);
  });

  it('in the clone, finds what serve needs installed already and installs nothing', async () => {
    const dir = join(mkdtempSync(join(tmpdir(), 'oncely-init-')), 'my-app');
    const { stdout } = await run(process.execPath, [CLI, 'init', dir]);
    expect(stdout).not.toMatch(/install/);
    expect(stdout).toMatch(/^next: npx oncely serve /m);
  });

  it('in a project without oncely, prints the install line with --no-install, in the package manager that ran it', async () => {
    const project = mkdtempSync(join(tmpdir(), 'oncely-init-project-'));
    writeFileSync(join(project, 'package.json'), '{}\n');
    mkdirSync(join(project, 'sub'));
    const line = `oncely@${version} better-sqlite3@12 hono@4 @hono/node-server@2 tsx@4 prom-client@15`;
    for (const [agent, command] of [
      ['npm/11.19.1 node/v20.20.2 linux x64 workspaces/false', 'npm install'],
      ['pnpm/9.12.0 npm/? node/v20.20.2 linux x64', 'pnpm add'],
      ['yarn/4.5.0 npm/? node/v20.20.2 linux x64', 'yarn add'],
      ['bun/1.1.30 npm/? node/v20.20.2 linux x64', 'bun add'],
    ] as const) {
      const app = `app-${command.split(' ')[0]}`;
      // From a folder below the project: the install goes to the nearest package.json above.
      const { stdout } = await run(process.execPath, [join(process.cwd(), CLI), 'init', app, '--no-install'], {
        cwd: join(project, 'sub'),
        env: { ...process.env, npm_config_user_agent: agent },
      });
      expect(stdout).toContain(`to serve the app, install what it needs (in ..): ${command} ${line}\n`);
    }
    // init wrote into the app's folder and the project's package.json is untouched.
    expect(readFileSync(join(project, 'package.json'), 'utf8')).toBe('{}\n');
  });

  it('an install that cannot run fails with the line to run again, the app created', async () => {
    const project = mkdtempSync(join(tmpdir(), 'oncely-init-project-'));
    writeFileSync(join(project, 'package.json'), '{}\n');
    // bun, as the user agent says, is not on this PATH.
    const failed = await run(process.execPath, [join(process.cwd(), CLI), 'init', 'my-app'], {
      cwd: project,
      env: { ...process.env, npm_config_user_agent: 'bun/1.1.30', PATH: join(project, 'no-bin') },
    }).then(
      () => undefined,
      (error: { code: number; stderr: string }) => error,
    );
    expect(failed?.code).toBe(1);
    expect(failed?.stderr.trim()).toBe(
      `oncely: bun add oncely@${version} better-sqlite3@12 hono@4 @hono/node-server@2 tsx@4 prom-client@15 failed (spawn bun ENOENT): the app is created, and oncely serve needs those packages; run it again`,
    );
    expect(existsSync(join(project, 'my-app', 'oncely.config.ts'))).toBe(true);
  });

  it('with no package.json here or above, creates none and prints what to run', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'oncely-init-bare-'));
    // A package.json above the temporary folder would make it a project: this case needs none.
    for (let at = dir; dirname(at) !== at; at = dirname(at))
      expect(existsSync(join(dirname(at), 'package.json')), dirname(at)).toBe(false);
    const { stdout } = await run(process.execPath, [join(process.cwd(), CLI), 'init', 'my-app'], { cwd: dir });
    expect(stdout).toContain(
      `no package.json here or above: to serve the app, install oncely with what it needs: npm install oncely@${version} better-sqlite3@12`,
    );
    expect(existsSync(join(dir, 'package.json'))).toBe(false);
    expect(existsSync(join(dir, 'my-app', 'oncely.config.ts'))).toBe(true);
  });

  it('prints the version of the package', async () => {
    expect((await run(process.execPath, [CLI, '--version'])).stdout.trim()).toBe(version);
  });
});
