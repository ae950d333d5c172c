import { performance } from 'node:perf_hooks';

/** One operation of a workload; `i` picks the key, so a replay can ask for the same keys again. */
export type Operation = (i: number) => Promise<unknown>;

/** How long a measurement may run: at most `n` operations, at most `maxMs`. */
export interface Budget {
  n: number;
  maxMs: number;
  concurrency: number;
}

/** What one measurement did. */
export interface Timing {
  ops: number;
  ms: number;
  opsPerSec: number;
  /** CPU of this process (user + system) per operation, µs. */
  cpuUs: number;
  /** CPU of the server per operation, µs, when the measurement could read it. */
  serverCpuUs?: number;
}

/** Reads a server's cumulative CPU time in µs (Redis: INFO cpu). */
export type ServerCpu = () => Promise<number>;

/**
 * Runs `op` for keys `from`, `from + 1`, ... with `concurrency` async workers pulling from one
 * counter, until `n` operations or `maxMs` have passed. With `cycle`, key indexes wrap around
 * `from .. from + cycle - 1` (a replay of the keys a first run created).
 */
export async function measure(
  op: Operation,
  budget: Budget,
  from: number,
  cycle?: number,
  serverCpu?: ServerCpu,
): Promise<Timing> {
  const serverBefore = await serverCpu?.();
  const cpuBefore = process.cpuUsage();
  let next = 0;
  let done = 0;
  const start = performance.now();
  const deadline = start + budget.maxMs;
  const worker = async () => {
    while (next < budget.n && performance.now() < deadline) {
      const i = next++;
      await op(from + (cycle ? i % cycle : i));
      done++;
    }
  };
  await Promise.all(Array.from({ length: budget.concurrency }, worker));
  const ms = performance.now() - start;
  const cpu = process.cpuUsage(cpuBefore);
  const timing: Timing = { ops: done, ms, opsPerSec: (done * 1000) / ms, cpuUs: (cpu.user + cpu.system) / done };
  if (serverCpu && serverBefore !== undefined) timing.serverCpuUs = ((await serverCpu()) - serverBefore) / done;
  return timing;
}

/**
 * Open loop: starts `op` at `rate` per second for `maxMs`, whatever the answers (at most
 * `concurrency` under way), so operations arrive spread out as requests do rather than in the
 * lockstep of `measure`'s workers, which all finish in one batch and start the next together.
 * Keys as in `measure`; waits for the last to finish.
 */
export async function paced(
  op: Operation,
  rate: number,
  budget: Omit<Budget, 'n'>,
  from: number,
  cycle?: number,
): Promise<Timing> {
  const cpuBefore = process.cpuUsage();
  const running = new Set<Promise<void>>();
  let started = 0;
  let done = 0;
  const start = performance.now();
  await new Promise<void>((resolve, reject) => {
    const timer = setInterval(() => {
      const elapsed = performance.now() - start;
      if (elapsed >= budget.maxMs) {
        clearInterval(timer);
        resolve();
        return;
      }
      const due = Math.floor((elapsed * rate) / 1000);
      while (started < due && running.size < budget.concurrency) {
        const i = started++;
        const run = op(from + (cycle ? i % cycle : i)).then(() => {
          done++;
          running.delete(run);
        });
        run.catch((error: unknown) => {
          clearInterval(timer);
          reject(error);
        });
        running.add(run);
      }
    }, 1);
  });
  await Promise.all(running);
  const ms = performance.now() - start;
  const cpu = process.cpuUsage(cpuBefore);
  return { ops: done, ms, opsPerSec: (done * 1000) / ms, cpuUs: (cpu.user + cpu.system) / done };
}

/** Runs `count` operations untimed, so JIT, prepared statements and connection pools are warm. */
export async function warmUp(op: Operation, count: number, concurrency: number, from: number): Promise<void> {
  await measure(op, { n: count, maxMs: Number.POSITIVE_INFINITY, concurrency }, from);
}

/** The best of several timings: on a noisy machine, noise only ever slows a run down. */
export function best(timings: Timing[]): Timing {
  return timings.reduce((a, b) => (b.opsPerSec > a.opsPerSec ? b : a));
}

/** A ratio check printed beside the measured ratio. */
export interface Check {
  ratio: number;
  min: number;
  /** A further goal, reported but not failed on. */
  goal?: number;
}

/** `3.20x ≥1.0x pass`, plus the goal when there is one. */
export function formatCheck(check: Check): string {
  const pass = check.ratio >= check.min ? 'pass' : 'FAIL';
  let text = `${check.ratio.toFixed(2)}x (≥${check.min}x ${pass}`;
  if (check.goal !== undefined) text += `; goal ${check.goal}x ${check.ratio >= check.goal ? 'met' : 'missed'}`;
  return `${text})`;
}

/** Thousands separators, no decimals. */
export function formatOps(opsPerSec: number | undefined): string {
  return opsPerSec === undefined ? '—' : Math.round(opsPerSec).toLocaleString('en-US');
}

/** A markdown table with aligned columns. */
export function markdownTable(header: string[], rows: string[][]): string {
  const widths = header.map((h, c) => Math.max(h.length, ...rows.map((r) => (r[c] ?? '').length)));
  const line = (cells: string[]) => `| ${cells.map((cell, c) => cell.padEnd(widths[c] ?? 0)).join(' | ')} |`;
  return [line(header), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...rows.map(line)].join('\n');
}

/** Reads a positive integer from the environment. */
export function envInt(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value <= 0) throw new Error(`${name} must be a positive integer, got ${raw}`);
  return value;
}
