/** How long `until` polls, and how often. */
export interface UntilOptions {
  timeoutMs?: number;
  intervalMs?: number;
}

/**
 * The one way the tests wait for something that becomes true eventually (a row, a log line, a gauge, a
 * consumer's effect, a process's exit): calls `read` every `intervalMs` until `done` accepts its value
 * (by default: the value is truthy), and returns that value. A `read` that throws is called again. After
 * `timeoutMs` it throws an Error naming `what` and the last value seen, or the last error `read` threw,
 * so a timeout on a loaded machine says how far things got.
 */
export async function until<T>(
  what: string,
  read: () => T | Promise<T>,
  done: (value: T) => boolean = Boolean,
  { timeoutMs = 15_000, intervalMs = 25 }: UntilOptions = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  // Set by the first read, which always runs.
  let last!: { value: T } | { error: unknown };
  for (;;) {
    try {
      const value = await read();
      if (done(value)) return value;
      last = { value };
    } catch (error) {
      last = { error };
    }
    if (Date.now() >= deadline) break;
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
  const seen =
    'error' in last
      ? `an error: ${last.error instanceof Error ? last.error.message : String(last.error)}`
      : shown(last.value);
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last seen: ${seen}`);
}

const SHOWN = 500;

/** A value as JSON, cut at SHOWN characters; what JSON cannot show (a BigInt, a cycle) as String(). */
function shown(value: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch {
    text = String(value);
  }
  return text.length > SHOWN ? `${text.slice(0, SHOWN)}… (${text.length} characters)` : text;
}
