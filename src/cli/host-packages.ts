/**
 * What `oncely serve` loads that `npm i oncely` does not bring: optional peers, which Node resolves
 * from where oncely is installed, so `oncely init` installs them into the project that installed
 * oncely (the nearest package.json at or above the current folder), with the package manager that
 * ran it. The idiom of `npx shadcn init`: a scaffolder that installs what the project needs.
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, realpathSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, isAbsolute, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { OncelyError } from '../core/errors.js';

/** The SQLite driver, the HTTP server and its Node adapter, the TypeScript loader, the metrics client. */
export const HOST_PACKAGES = ['better-sqlite3', 'hono', '@hono/node-server', 'tsx', 'prom-client'] as const;

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const PKG = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
  version: string;
  peerDependencies: Record<string, string>;
};

/** What init installs, where, and the command that does it. */
export interface HostInstall {
  /** The folder of the nearest package.json at or above the current one; undefined when there is none. */
  project: string | undefined;
  /** Install specs, each with the major oncely declares (`better-sqlite3@12`: the latest major may not fit). */
  specs: string[];
  /** The package manager's command and its arguments. */
  command: string[];
}

/**
 * Plans the install for the project at or above `cwd`: the host packages that do not resolve
 * there, and oncely itself when this copy runs from outside it (npx's cache, a global install).
 */
export function planHostInstall(cwd: string, userAgent = process.env.npm_config_user_agent): HostInstall {
  const project = nearestProject(cwd);
  const from = project ?? cwd;
  const own = inside(realpathSync(ROOT), realpathSync(from));
  const specs = [
    ...(own ? [] : [`oncely@${PKG.version}`]),
    ...HOST_PACKAGES.filter((name) => !resolves(name, from)).map((name) => {
      const major = /\d+/.exec(PKG.peerDependencies[name] ?? '')?.[0];
      return major === undefined ? name : `${name}@${major}`;
    }),
  ];
  const manager = /^(pnpm|yarn|bun)\//.exec(userAgent ?? '')?.[1] ?? 'npm';
  return { project, specs, command: [manager, manager === 'npm' ? 'install' : 'add', ...specs] };
}

/**
 * Installs what `oncely serve` needs (see planHostInstall), printing the command it runs; with
 * `run` false, or with no package.json at or above `cwd` (no project to add to, and init makes
 * none in a folder it was not asked to), it prints the command instead.
 */
export async function installHostPackages(cwd: string, run: boolean, print: (line: string) => void): Promise<void> {
  const plan = planHostInstall(cwd);
  if (plan.specs.length === 0) return;
  const line = plan.command.join(' ');
  if (plan.project === undefined) {
    print(`no package.json here or above: to serve the app, install oncely with what it needs: ${line}`);
    return;
  }
  const where = plan.project === resolve(cwd) ? '' : ` (in ${relative(cwd, plan.project)})`;
  if (!run) {
    print(`to serve the app, install what it needs${where}: ${line}`);
    return;
  }
  print(`installing what oncely serve needs${where}: ${line}`);
  const [command = 'npm', ...args] = plan.command;
  const failure = await new Promise<string | undefined>((done) => {
    const child = spawn(command, args, { cwd: plan.project, stdio: 'inherit', shell: process.platform === 'win32' });
    child.once('error', (error) => done(error.message));
    child.once('exit', (code, signal) => done(code === 0 ? undefined : `exit ${code ?? signal}`));
  });
  if (failure !== undefined)
    throw new OncelyError(
      'PACKAGE_MISSING',
      `${line} failed (${failure}): the app is created, and oncely serve needs those packages; run it again${where}`,
    );
}

/** The folder of the nearest package.json at or above `dir`. */
function nearestProject(dir: string): string | undefined {
  for (let at = resolve(dir); ; at = dirname(at)) {
    if (existsSync(join(at, 'package.json'))) return at;
    if (dirname(at) === at) return undefined;
  }
}

/** Whether `path` is `folder` or below it. */
function inside(path: string, folder: string): boolean {
  const rel = relative(folder, path);
  return rel === '' || (rel !== '..' && !rel.startsWith(`..${sep}`) && !isAbsolute(rel));
}

/** Whether `name` resolves from `dir` as Node resolves it from a module there. */
function resolves(name: string, dir: string): boolean {
  try {
    createRequire(join(dir, 'package.json')).resolve(name);
    return true;
  } catch {
    return false;
  }
}
