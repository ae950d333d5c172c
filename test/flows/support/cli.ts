import { execFile } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const MAIN = fileURLToPath(new URL('../../../dist/cli/main.js', import.meta.url));

/** What one CLI run printed, and its exit code. */
export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the built CLI (`npm run build` first) in an empty folder: no app folder to load. */
export function oncely(...args: string[]): Promise<CliRun> {
  const cwd = mkdtempSync(join(tmpdir(), 'oncely-no-app-'));
  return new Promise((resolve) => {
    execFile(process.execPath, [MAIN, ...args], { cwd, timeout: 30_000 }, (error, stdout, stderr) => {
      const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}
