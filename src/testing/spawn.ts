import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { extname } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { CallerOutcome } from './outcome.js';

// The child beside this file: child.ts in the repository (run by tsx), child.js in the package.
const CHILD = fileURLToPath(new URL(`./child${extname(fileURLToPath(import.meta.url))}`, import.meta.url));

/** What the parent sends as the child's one argument (see child.ts). */
export interface ChildJob {
  module: string;
  export: string;
  input?: unknown;
  mode: 'calls' | 'once' | 'retry';
  calls?: number;
  /** The process's number in a storm, for the caller's phase. */
  process?: number;
  /** Caller numbers start here. */
  firstCaller?: number;
  retryForMs?: number;
}

/** A running child of the kit and what it printed. */
export interface Child {
  child: ChildProcessWithoutNullStreams;
  /** Every stdout line so far. */
  lines: string[];
  /** Resolves with the first line starting with `prefix`; rejects when the child exits first. */
  line(prefix: string): Promise<string>;
  /** Resolves at exit with the code or signal, the stdout lines and the last of stderr. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }>;
}

/** Where the user's code runs: its module and export, the input it is called with, extra environment. */
export interface ChildTarget {
  /** Absolute path of the module (.ts needs tsx installed; .js and .mjs run as they are). */
  module: string;
  /** The export to call as `(input, caller)`. Default 'default'. */
  export?: string;
  input?: unknown;
  env?: Record<string, string>;
}

/** Starts the kit's child on a job. TypeScript (the child or the user's module) runs under tsx. */
export function startChild(target: ChildTarget, job: Omit<ChildJob, 'module' | 'export' | 'input'>): Child {
  const full: ChildJob = { ...job, module: target.module, export: target.export ?? 'default', input: target.input };
  const ts = CHILD.endsWith('.ts') || /\.[cm]?ts$/.test(target.module);
  const child = spawn(process.execPath, [...(ts ? ['--import', 'tsx'] : []), CHILD, JSON.stringify(full)], {
    env: { ...process.env, ...target.env },
  });
  const lines: string[] = [];
  const waiters: { prefix: string; resolve: (l: string) => void }[] = [];
  let stderr = '';
  child.stderr.on('data', (chunk) => {
    stderr = (stderr + chunk).slice(-4_000);
  });
  createInterface({ input: child.stdout }).on('line', (l) => {
    lines.push(l);
    for (const w of [...waiters])
      if (l.startsWith(w.prefix)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(l);
      }
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; stderr: string }>((resolve) =>
    child.on('close', (code, signal) => resolve({ code, signal, stderr })),
  );
  return {
    child,
    lines,
    exited,
    line(prefix) {
      const found = lines.find((l) => l.startsWith(prefix));
      if (found) return Promise.resolve(found);
      return new Promise((resolve, reject) => {
        waiters.push({ prefix, resolve });
        void exited.then(({ code, signal }) =>
          reject(new Error(`child exited (${code ?? signal}) before printing ${prefix}: ${stderr}`)),
        );
      });
    },
  };
}

/** The outcomes a child printed on its result line. */
export function parseOutcomes(line: string): CallerOutcome[] {
  return JSON.parse(line.slice(line.indexOf(' ') + 1)) as CallerOutcome[];
}
