/**
 * An empty folder with oncely installed from its packed tarball, as a registry user gets it: no
 * devDependencies, nothing of the repository on the module path.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const exec = promisify(execFile);
export const REPO = fileURLToPath(new URL('../..', import.meta.url));
export const PKG = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as {
  version: string;
  devDependencies: Record<string, string>;
  exports: Record<string, unknown>;
};

/**
 * The environment of a user's shell: none of the npm_* variables `npm test` sets for its scripts
 * (they would point nested npm commands at this repository), the same npm cache.
 */
function userEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env))
    if (!/^npm_/i.test(name) || name === 'npm_config_cache') env[name] = value;
  return { ...env, ...extra };
}

/** A user's folder with oncely installed from `npm pack`. */
export interface Workspace {
  dir: string;
  /** What npm printed when it installed the tarball (its warnings included). */
  installed: string;
  /** Runs a command in the folder; rejects with its output when it exits non-zero. */
  run(command: string, args: string[], options?: { cwd?: string }): Promise<{ stdout: string; stderr: string }>;
  /** Starts a long-running command; `line(re)` resolves with the first stdout line matching. */
  start(command: string, args: string[]): { child: ChildProcess; line(re: RegExp): Promise<string>; output(): string };
}

/**
 * Packs the built repository (`npm run build` ran before, as `npm test` does) and installs the
 * tarball into a new empty folder, from npm's cache where it has the packages.
 *
 * `oncely init` installs better-sqlite3 there later, which downloads its prebuilt binary from
 * GitHub, which this machine cannot reach, and then compiles from source (about 60 s on 2 cores).
 * prebuild-install also takes a prebuild from a local folder: the test packs the binary `npm ci`
 * built for the repository (same version, same Node ABI) into one, so the install runs the real
 * install script without compiling it twice. ONCELY_PACKAGE_SOURCE_BUILD=1 skips that and
 * measures the source build. Every npm in the folder, init's own included, prefers npm's cache.
 */
export async function packedWorkspace(): Promise<Workspace> {
  const root = mkdtempSync(join(tmpdir(), 'oncely-packed-'));
  const dir = join(root, 'app');
  mkdirSync(dir);
  // What `npm i` leaves in an empty folder: no "type", so the folder is CommonJS; the app that
  // `oncely init` makes carries its own package.json saying "module".
  writeFileSync(join(dir, 'package.json'), '{}\n');
  const extra: Record<string, string> = { npm_config_prefer_offline: 'true' };
  if (process.env.ONCELY_PACKAGE_SOURCE_BUILD !== '1') {
    const prebuilds = join(root, 'prebuilds');
    mkdirSync(prebuilds);
    const sqlite = join(REPO, 'node_modules', 'better-sqlite3');
    const { version } = JSON.parse(readFileSync(join(sqlite, 'package.json'), 'utf8')) as { version: string };
    const name = `better-sqlite3-v${version}-node-v${process.versions.modules}-${process.platform}-${process.arch}.tar.gz`;
    await exec('tar', ['-czf', join(prebuilds, name), 'build/Release/better_sqlite3.node'], { cwd: sqlite });
    extra.npm_config_better_sqlite3_local_prebuilds = prebuilds;
  }
  const env = userEnv(extra);
  const run: Workspace['run'] = async (command, args, options = {}) => {
    try {
      return await exec(command, args, { cwd: options.cwd ?? dir, env, maxBuffer: 16 << 20 });
    } catch (error) {
      const e = error as { stdout?: string; stderr?: string; message: string };
      throw new Error(`${command} ${args.join(' ')} failed: ${e.message}\n${e.stdout ?? ''}\n${e.stderr ?? ''}`);
    }
  };
  const packed = await run('npm', ['pack', '--ignore-scripts', '--silent', '--pack-destination', root], { cwd: REPO });
  const tarball = join(root, packed.stdout.trim().split('\n').pop() ?? '');
  const install = await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', tarball]);
  return {
    dir,
    installed: `${install.stdout}\n${install.stderr}`,
    run,
    start(command, args) {
      const child = spawn(command, args, { cwd: dir, env });
      const lines: string[] = [];
      const waiters: { re: RegExp; resolve: (l: string) => void }[] = [];
      let errors = '';
      child.stderr?.on('data', (chunk) => {
        errors += chunk;
      });
      if (child.stdout)
        createInterface({ input: child.stdout }).on('line', (l) => {
          lines.push(l);
          for (const w of waiters.filter((w) => w.re.test(l))) {
            waiters.splice(waiters.indexOf(w), 1);
            w.resolve(l);
          }
        });
      return {
        child,
        output: () => `${lines.join('\n')}\n${errors}`,
        line: (re) =>
          new Promise((resolve, reject) => {
            const seen = lines.find((l) => re.test(l));
            if (seen !== undefined) return resolve(seen);
            waiters.push({ re, resolve });
            child.once('exit', (code) =>
              reject(new Error(`exited ${code} before ${re}:\n${lines.join('\n')}\n${errors}`)),
            );
          }),
      };
    },
  };
}

/** What a folder's node_modules holds: packages (name@version), bytes, native modules and install scripts. */
export interface Footprint {
  packages: string[];
  bytes: number;
  /** Packages with a compiled addon (a `.node` file) or a binding.gyp, which npm builds on install. */
  native: string[];
  /** Packages with a preinstall, install or postinstall script, as `name@version (script: command)`. */
  scripts: string[];
}

const INSTALL_SCRIPTS = ['preinstall', 'install', 'postinstall'];

/** Walks `dir`/node_modules, nested node_modules included, without following links. */
export function footprint(dir: string): Footprint {
  const found: Footprint = { packages: [], bytes: 0, native: [], scripts: [] };
  /** Bytes of the files below `path`, and whether one is an addon; nested node_modules are packages of their own. */
  const files = (path: string): { bytes: number; native: boolean } => {
    const stat = lstatSync(path);
    if (!stat.isDirectory()) return { bytes: stat.size, native: /(\.node|binding\.gyp)$/.test(path) };
    const inner = readdirSync(path)
      .filter((entry) => entry !== 'node_modules')
      .map((entry) => files(join(path, entry)));
    return { bytes: inner.reduce((n, f) => n + f.bytes, 0), native: inner.some((f) => f.native) };
  };
  const walk = (modules: string): void => {
    const entries = readdirSync(modules, { withFileTypes: true }).filter((e) => e.isDirectory() && e.name !== '.bin');
    for (const entry of entries) {
      const path = join(modules, entry.name);
      if (entry.name.startsWith('@')) {
        walk(path);
        continue;
      }
      const pkg = JSON.parse(readFileSync(join(path, 'package.json'), 'utf8')) as {
        name: string;
        version: string;
        scripts?: Record<string, string>;
      };
      const id = `${pkg.name}@${pkg.version}`;
      found.packages.push(id);
      const { bytes, native } = files(path);
      found.bytes += bytes;
      if (native) found.native.push(id);
      for (const script of INSTALL_SCRIPTS)
        if (pkg.scripts?.[script]) found.scripts.push(`${id} (${script}: ${pkg.scripts[script]})`);
      if (existsSync(join(path, 'node_modules'))) walk(join(path, 'node_modules'));
    }
  };
  walk(join(dir, 'node_modules'));
  found.packages.sort();
  return found;
}

/** One line for the test's output: packages besides `without`, MB, native modules, install scripts. */
export function describeFootprint(label: string, f: Footprint, without: readonly string[]): string {
  const others = f.packages.filter((p) => !without.some((name) => p.startsWith(`${name}@`)));
  const list = (items: string[]) => (items.length === 0 ? 'none' : items.join(', '));
  return `${label}: ${others.length} package${others.length === 1 ? '' : 's'} besides ${without.join(' and ')}${others.length <= 5 ? ` (${list(others)})` : ''}, ${(f.bytes / 1e6).toFixed(1)} MB of node_modules, native modules: ${list(f.native)}, install scripts: ${list(f.scripts)}`;
}
