/**
 * Issue 30 item 14: a configuration mistake stops the start with one line saying what to change:
 * a key nobody reads (with the nearest known one), a database URL the host cannot run on, a URL
 * that does not parse (when the store is created, not at its first call), a package not installed.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { closest } from '../../src/core/closest.js';
import { OncelyError } from '../../src/core/errors.js';
import { loadPeer } from '../../src/core/peer.js';
import { openDb } from '../../src/db/index.js';
import { loadApp } from '../../src/host/app.js';
import { checkConfig, type HostConfig } from '../../src/host/config.js';
import { mysqlStore } from '../../src/mysql/index.js';
import { retentionSettings } from '../../src/ops/retention.js';
import { postgresStore } from '../../src/postgres/index.js';
import { redisStore } from '../../src/redis/index.js';

const run = promisify(execFile);
const CLI = 'dist/cli/main.js';
const REPO = fileURLToPath(new URL('../..', import.meta.url));
// A package no registry user would install: stands in for an optional peer (pg, zod...) left out.
const ABSENT = 'oncely-review3-absent-peer';

/** What `act` throws, or undefined. */
async function thrown(act: () => unknown): Promise<unknown> {
  try {
    await act();
  } catch (error) {
    return error;
  }
  return undefined;
}

/** An app folder with these files, as `oncely init` writes one (ES modules). */
function app(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), 'oncely-config-'));
  writeFileSync(join(dir, 'package.json'), '{ "type": "module" }\n');
  for (const [name, text] of Object.entries(files)) {
    mkdirSync(join(dir, name, '..'), { recursive: true });
    writeFileSync(join(dir, name), text);
  }
  return dir;
}

/** Runs the built CLI in `cwd`, expecting exit code 1 and one line on stderr; that line. */
async function refused(args: string[], cwd = REPO): Promise<string> {
  const failed = await run(process.execPath, [join(REPO, CLI), ...args], { cwd }).then(
    () => undefined,
    (error: { code: number; stderr: string }) => error,
  );
  expect(failed, 'the command should fail').toBeDefined();
  expect(failed?.code).toBe(1);
  const lines = (failed?.stderr ?? '').trim().split('\n');
  expect(lines, 'one line on stderr').toHaveLength(1);
  return lines[0] ?? '';
}

describe('review3.14: a key nobody reads stops the start, naming it and the nearest known key', () => {
  it('refuses a misspelt top-level key of the config with the key it meant', async () => {
    const refusal = await thrown(() => checkConfig({ retentoin: { events: '7d' } } as HostConfig, 'oncely.config.ts'));
    expect(refusal).toBeInstanceOf(OncelyError);
    expect(refusal).toMatchObject({
      code: 'CONFIG_KEY_UNKNOWN',
      message: "oncely.config.ts: unknown key 'retentoin' (did you mean 'retention'?)",
    });
  });

  it('refuses a key of a later version (schedules) listing the keys oncely reads', async () => {
    const refusal = (await thrown(() => checkConfig({ schedules: {} } as HostConfig, 'c.ts'))) as OncelyError;
    expect(refusal.code).toBe('CONFIG_KEY_UNKNOWN');
    expect(refusal.message).toMatch(/^c\.ts: unknown key 'schedules' \(known keys: sources, tenant, .*reconcile\)$/);
  });

  it('refuses misspelt keys inside events, reconcile, duplicateScan, effects and retention', async () => {
    const cases: [HostConfig, string][] = [
      [
        { events: { maxAtempts: 3 } } as HostConfig,
        "unknown key 'events.maxAtempts' (did you mean 'events.maxAttempts'?)",
      ],
      [
        { reconcile: { olderthan: '1m' } } as HostConfig,
        "unknown key 'reconcile.olderthan' (did you mean 'reconcile.olderThan'?)",
      ],
      [
        { duplicateScan: { evry: '1h' } } as HostConfig,
        "unknown key 'duplicateScan.evry' (did you mean 'duplicateScan.every'?)",
      ],
      [
        {
          effects: [
            { table: 'ledger', by: ['id'] },
            { table: 't', bye: ['id'] },
          ],
        } as HostConfig,
        "unknown key 'effects[1].bye' (did you mean 'effects[1].by'?)",
      ],
    ];
    for (const [config, message] of cases)
      expect(await thrown(() => checkConfig(config, 'c.ts'))).toMatchObject({
        code: 'CONFIG_KEY_UNKNOWN',
        message: `c.ts: ${message}`,
      });
    expect(await thrown(() => retentionSettings({ evnts: '1d' } as never))).toMatchObject({
      code: 'CONFIG_KEY_UNKNOWN',
      message: "oncely.config.ts: unknown key 'retention.evnts' (did you mean 'retention.events'?)",
    });
    // What every known key of a full config passes.
    expect(() =>
      checkConfig(
        { db: 'x', events: { maxAttempts: 1 }, reconcile: false, duplicateScan: { every: '1h' }, retention: false },
        'c.ts',
      ),
    ).not.toThrow();
  });

  it('suggests only a key near enough to be the one meant', () => {
    expect(closest('retentoin', ['retention', 'reconcile'])).toBe('retention');
    expect(closest('Timeout', ['timeout'])).toBe('timeout');
    expect(closest('schedules', ['sources', 'tenant', 'db'])).toBeUndefined();
  });

  it("refuses a handler's and a consumer's export that nobody reads, naming the file", async () => {
    const handler = app({
      'handlers/orders/create.ts':
        "export const handle = () => ({});\nexport const idempotency = { keyfields: ['id'] };\n",
    });
    expect(await thrown(() => loadApp(handler))).toMatchObject({
      code: 'CONFIG_KEY_UNKNOWN',
      message: `${join(handler, 'handlers/orders/create.ts')}: unknown key 'idempotency.keyfields' (did you mean 'idempotency.keyFields'?)`,
    });
    const top = app({
      'handlers/orders/create.ts': "export const handle = () => ({});\nexport const timout = '5s';\n",
    });
    expect(await thrown(() => loadApp(top))).toMatchObject({
      code: 'CONFIG_KEY_UNKNOWN',
      message: `${join(top, 'handlers/orders/create.ts')}: unknown key 'timout' (did you mean 'timeout'?)`,
    });
    const consumer = app({
      'consumers/shop/order.paid.ts':
        "export const handle = () => {};\nexport const requires = () => true;\nexport const requireWithin = '1m';\n",
    });
    expect(await thrown(() => loadApp(consumer))).toMatchObject({
      code: 'CONFIG_KEY_UNKNOWN',
      message: `${join(consumer, 'consumers/shop/order.paid.ts')}: unknown key 'requireWithin' (did you mean 'requiresWithin'?)`,
    });
  });

  it('oncely serve of an app whose config has a typo exits 1 with one line naming the key and the suggestion', async () => {
    const dir = app({ 'oncely.config.ts': "export default { retentoin: { events: '7d' } };\n" });
    expect(await refused(['serve', dir, '--port', '0'])).toBe(
      `oncely: ${join(dir, 'oncely.config.ts')}: unknown key 'retentoin' (did you mean 'retention'?)`,
    );
    expect(existsSync(join(dir, '.oncely')), 'nothing was opened').toBe(false);
  });
});

describe('review3.14: a database the host cannot run on, or a URL that does not parse, is refused before anything opens', () => {
  it('refuses a mysql:// --db with one line instead of making a SQLite file named mysql:', async () => {
    const cwd = mkdtempSync(join(tmpdir(), 'oncely-cwd-'));
    const dir = app({});
    expect(await refused(['serve', dir, '--port', '0', '--db', 'mysql://root:hunter2@127.0.0.1:3306/test'], cwd)).toBe(
      "oncely: the database mysql://root:***@127.0.0.1:3306/test is a mysql:// URL; the host runs on a SQLite file path or a postgres:// URL (MySQL and Redis hold the engine's records only: mysqlStore, redisStore)",
    );
    expect(readdirSync(cwd), 'no file or folder was made').toEqual([]);
    // The config's `db` goes the same way.
    const configured = app({ 'oncely.config.ts': "export default { db: 'redis://127.0.0.1:6379' };\n" });
    expect(await refused(['migrate', configured], cwd)).toMatch(
      /^oncely: the database redis:\/\/127\.0\.0\.1:6379 is a redis:\/\/ URL;/,
    );
    expect(readdirSync(cwd)).toEqual([]);
    expect(await thrown(() => openDb('mysql://root@127.0.0.1/test'))).toMatchObject({ code: 'DB_UNSUPPORTED' });
  });

  it('refuses a malformed postgres URL when openDb or a store is created, naming the URL, not a DNS error later', async () => {
    for (const make of [
      () => openDb('postgres://user:s3cret@:bad/test'),
      () => postgresStore({ connectionString: 'postgres://user:s3cret@:bad/test' }),
    ]) {
      const refusal = (await thrown(make)) as OncelyError;
      expect(refusal).toBeInstanceOf(OncelyError);
      expect(refusal.code).toBe('URL_INVALID');
      expect(refusal.message).toMatch(/postgres:\/\/user:\*\*\*@:bad\/test is not a valid URL$/);
      expect(refusal.message).not.toContain('s3cret');
    }
    expect(await thrown(() => postgresStore({ connectionString: 'postgres:///test' }))).toMatchObject({
      code: 'URL_INVALID',
      message: 'postgresStore connectionString postgres:///test names no host',
    });
    expect(await thrown(() => mysqlStore({ uri: 'mysql://root@:bad/test' }))).toMatchObject({ code: 'URL_INVALID' });
    expect(await thrown(() => redisStore({ url: 'redis://:x@:bad' }))).toMatchObject({ code: 'URL_INVALID' });
    // A socket folder in `host` names the host as pg reads it.
    await postgresStore({ connectionString: 'postgres:///test?host=/var/run/postgresql' }).close();
  });

  it('oncely serve --db with a malformed postgres URL exits 1 with one line about the URL', async () => {
    const dir = app({});
    expect(await refused(['serve', dir, '--port', '0', '--db', 'postgres://user@:bad'])).toBe(
      'oncely: the database postgres://user@:bad is not a valid URL',
    );
  });
});

describe('review3.14: a missing optional package gets one line saying what to npm install', () => {
  it('loadPeer answers PACKAGE_MISSING with the install line, and rethrows any other failure as it is', async () => {
    const specifier: string = ABSENT;
    expect(await thrown(() => loadPeer(() => import(specifier), 'a test feature', [ABSENT]))).toMatchObject({
      code: 'PACKAGE_MISSING',
      message: `a test feature needs '${ABSENT}': npm install ${ABSENT}`,
    });
    const crash = new Error('boom');
    expect(await thrown(() => loadPeer(() => Promise.reject(crash), 'x', ['pg']))).toBe(crash);
  });

  it("names the app's file and the install line when a handler imports a package that is not installed (zod, say)", async () => {
    const dir = app({ 'handlers/orders/create.ts': `import '${ABSENT}';\nexport const handle = () => ({});\n` });
    expect(await thrown(() => loadApp(dir))).toMatchObject({
      code: 'PACKAGE_MISSING',
      message: `${join(dir, 'handlers/orders/create.ts')} needs '${ABSENT}': npm install ${ABSENT}`,
    });
    expect(await refused(['serve', dir, '--port', '0'])).toBe(
      `oncely: ${join(dir, 'handlers/orders/create.ts')} needs '${ABSENT}': npm install ${ABSENT}`,
    );
  });

  it('every import of an optional peer in src/ goes through loadPeer', () => {
    const pkg = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as {
      peerDependenciesMeta: Record<string, { optional?: boolean }>;
    };
    // Absent OpenTelemetry means no spans, on purpose: nothing to install for that.
    const peers = Object.keys(pkg.peerDependenciesMeta).filter((name) => name !== '@opentelemetry/api');
    const bare: string[] = [];
    const walk = (folder: string): void => {
      for (const entry of readdirSync(folder, { withFileTypes: true })) {
        const path = join(folder, entry.name);
        if (entry.isDirectory()) walk(path);
        else if (entry.name.endsWith('.ts'))
          for (const match of readFileSync(path, 'utf8').matchAll(/(?<!typeof )\bimport\('([^']+)'\)/g)) {
            const name = match[1] ?? '';
            if (!peers.some((peer) => name === peer || name.startsWith(`${peer}/`))) continue;
            const before = readFileSync(path, 'utf8').slice(Math.max(0, (match.index ?? 0) - 160), match.index);
            if (!before.includes('loadPeer(')) bare.push(`${path.slice(REPO.length)}: import('${name}')`);
          }
      }
    };
    walk(join(REPO, 'src'));
    expect(bare).toEqual([]);
  });
});
