import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const WORKER = fileURLToPath(new URL('./worker.ts', import.meta.url));

/** A worker process and the lines it printed, in order. */
export interface Worker {
  child: ChildProcessWithoutNullStreams;
  /** Resolves with the first printed line equal to `line` (or, for '{' and '[', the first JSON line). */
  waitFor(line: string): Promise<string>;
  /** Resolves when the process has exited, with its exit code or signal. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Starts a worker script (default test/support/worker.ts) with a job, in its own Node process. */
export function startWorker(job: object, script = WORKER): Worker {
  const child = spawn(process.execPath, ['--import', 'tsx', script, JSON.stringify(job)]);
  const seen: string[] = [];
  const waiters: { match: (l: string) => boolean; resolve: (l: string) => void }[] = [];
  let stderr = '';
  child.stderr.on('data', (chunk) => {
    stderr += chunk;
  });
  createInterface({ input: child.stdout }).on('line', (line) => {
    seen.push(line);
    for (const w of [...waiters]) {
      if (w.match(line)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(line);
      }
    }
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  return {
    child,
    exited,
    waitFor(line) {
      // '{' or '[' waits for the first JSON line; anything else for that exact line.
      const match = (l: string) => (line === '{' || line === '[' ? l.startsWith(line) : l === line);
      const found = seen.find(match);
      if (found) return Promise.resolve(found);
      return new Promise((resolve, reject) => {
        waiters.push({ match, resolve });
        void exited.then(({ code, signal }) =>
          reject(new Error(`worker exited (${code ?? signal}) before printing ${line}: ${stderr}`)),
        );
      });
    },
  };
}
