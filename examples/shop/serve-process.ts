/**
 * A real `oncely serve` (the built CLI, so `npm run build` first) of an app folder on a database,
 * as a child process: the storm's hosts, and the dashboard tests' serve (test/dashboard/serve.ts).
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const CLI = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));

/** One `oncely serve` process and the URL it listens on. */
export interface ServeProcess {
  child: ChildProcessWithoutNullStreams;
  url: string;
  /** The lines it printed on stdout (its banner). */
  stdout: string[];
  /** The last 4 kB it wrote to stderr. */
  stderr(): string;
}

/** Starts `oncely serve <app> --db <db>` on a free port; resolves once its banner is printed whole. */
export function startServeProcess(app: string, db: string, env: NodeJS.ProcessEnv): Promise<ServeProcess> {
  const child = spawn(process.execPath, [CLI, 'serve', app, '--db', db, '--port', '0'], { env });
  let stderr = '';
  child.stderr.on('data', (chunk) => {
    stderr = (stderr + chunk).slice(-4000);
  });
  const stdout: string[] = [];
  return new Promise((resolve, reject) => {
    let url = '';
    createInterface({ input: child.stdout }).on('line', (line) => {
      stdout.push(line);
      url ||= /on (http:\/\/localhost:\d+)/.exec(line)?.[1] ?? '';
      // The banner's last line: everything it prints is there.
      if (url && line.startsWith('stop with Ctrl-C')) resolve({ child, url, stdout, stderr: () => stderr });
    });
    child.on('exit', (code, signal) => reject(new Error(`oncely serve exited (${code ?? signal}): ${stderr}`)));
  });
}
