/** `oncely serve` refusing to start: one line saying what to change, and a non-zero exit. */
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const CLI = 'dist/cli/main.js';

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

  it('prints the version of the package', async () => {
    const { version } = (await import('../package.json', { with: { type: 'json' } })).default;
    expect((await run(process.execPath, [CLI, '--version'])).stdout.trim()).toBe(version);
  });
});
