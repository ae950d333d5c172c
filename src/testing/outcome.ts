/** The line a kit child prints once it can be started with a line on stdin. */
export const READY_LINE = 'oncely:ready';
/** The prefix of the line carrying a kit child's outcomes as JSON. */
export const RESULT_LINE = 'oncely:result';

/** What one caller got, as the kit reports it: in this process or across a child's stdout (JSON). */
export interface CallerOutcome {
  /** The caller's number, from 0, in the order the storm made them. */
  caller: number;
  /** How it was made: 'sequential', 'concurrent', or 'process <k>' for a child process's call. */
  phase: string;
  ok: boolean;
  /** What the call returned (a RunResult's `value` when it returned one). */
  value?: unknown;
  /** From a RunResult (wrap, run, an agent tool's result): whether it was replayed. */
  replayed?: boolean;
  /** From a RunResult: the record's attempt count (above 1 after a takeover). */
  attempts?: number;
  /** From a thrown error: its `code` (an OncelyError's), else absent. */
  code?: string;
  message?: string;
}

/** The outcome of one settled call, read the way every surface answers. */
export function outcomeOf(caller: number, phase: string, settled: PromiseSettledResult<unknown>): CallerOutcome {
  if (settled.status === 'rejected') {
    const error = settled.reason as { code?: unknown; message?: unknown };
    const code = typeof error?.code === 'string' ? error.code : undefined;
    const message = typeof error?.message === 'string' ? error.message : String(settled.reason);
    return { caller, phase, ok: false, ...(code ? { code } : {}), message };
  }
  const got = settled.value as { value?: unknown; replayed?: unknown; record?: { attempts?: unknown } } | undefined;
  if (got && typeof got === 'object' && typeof got.replayed === 'boolean') {
    // Attempts, not the fence: Redis fences are times, not counts.
    const attempts = typeof got.record?.attempts === 'number' ? got.record.attempts : undefined;
    return { caller, phase, ok: true, value: got.value, replayed: got.replayed, ...(attempts ? { attempts } : {}) };
  }
  return { caller, phase, ok: true, value: settled.value };
}

/** The header every oncely HTTP surface answers a replay with: the middleware's and the host's `/v1/invoke`. */
const REPLAYED_HEADER = 'idempotent-replayed';
/** The header of a host's executed `/v1/invoke` answer: the record's attempt that ran it (above 1 after a takeover). */
const ATTEMPT_HEADER = 'oncely-attempt';

/**
 * A host's `POST /v1/invoke/:handler` answer read the way the kit reports a call: `{ value: data,
 * replayed, record: { attempts } }` (replayed from `Idempotent-Replayed`, the attempt that ran the
 * answer, replayed or not, from `Oncely-Attempt`), or the envelope's error thrown with its `code`
 * and `status`. A storm's or crash child's `run` returns it so the report tells replays, executions
 * and takeovers (attempt above 1, not replayed) apart.
 */
export async function invokeResult(
  res: Response,
): Promise<{ value: unknown; replayed: boolean; record?: { attempts: number } }> {
  const answer = (await res.json()) as { data?: unknown; error?: { code: string; message: string } };
  if (answer.error)
    throw Object.assign(new Error(answer.error.message), { code: answer.error.code, status: res.status });
  const replayed = res.headers.get(REPLAYED_HEADER) === 'true';
  const attempts = Number(res.headers.get(ATTEMPT_HEADER));
  return Number.isSafeInteger(attempts) && attempts > 0
    ? { value: answer.data, replayed, record: { attempts } }
    : { value: answer.data, replayed };
}

/** A short text of what a caller got: 'replayed', 'executed', 'IN_PROGRESS', 'ok', 'error: ...'. */
export function gotOf(outcome: CallerOutcome): string {
  if (!outcome.ok) return outcome.code ?? `error: ${outcome.message ?? ''}`.slice(0, 60);
  if (outcome.replayed === true) return 'replayed';
  if (outcome.replayed === false) return outcome.attempts && outcome.attempts > 1 ? 'taken over' : 'executed';
  return 'ok';
}

/** Counts of each `gotOf` text, e.g. { executed: 1, replayed: 9 }. */
export function tally(outcomes: CallerOutcome[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const o of outcomes) counts[gotOf(o)] = (counts[gotOf(o)] ?? 0) + 1;
  return counts;
}

/** A plain-text table: a header row and one row per line, columns padded to their widest cell. */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd();
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}
