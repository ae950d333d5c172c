import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { until } from './support/wait.js';

/**
 * Waiting is done one way (issue 31): a condition that becomes true eventually is awaited with
 * test/support/wait.ts's `until`, and a fixed sleep stays only where the duration is the point, with a
 * `// sleep: <why>` comment on its line or the line before. This test reads the tests' sources and fails
 * on a file that defines its own polling helper, polls against a deadline by hand, or sleeps without
 * saying why.
 */

type Kind = 'helper' | 'deadline' | 'sleep';

interface Finding {
  kind: Kind;
  line: number;
  text: string;
}

const RULES: { kind: Kind; pattern: RegExp }[] = [
  // A polling helper of the file's own: `function until(`, `const waitFor = `, `async function eventually<T>(`
  // (a deadline kept in a variable named `until` is the next rule's business).
  {
    kind: 'helper',
    pattern:
      /\b(?:function\s*\*?\s*|(?:const|let|var)\s+)(?:until|eventually|waitFor\w*|waitUntil\w*|poll\w*)\s*(?:[(<]|=(?!\s*Date\.now\(\)))/,
  },
  // A hand-written poll loop: give up once the clock passes a deadline, or go on while it has not. A loop
  // that runs load for a while (`while (Date.now() < end)` with no wait inside) is not one.
  {
    kind: 'deadline',
    pattern:
      /if\s*\(\s*Date\.now\(\)\s*>=?\s*[\w.]+\s*\)\s*(?:throw|break|return)\b|Date\.now\(\)\s*<=?\s*\w*deadline/i,
  },
  // A sleep: a promise resolved by a timer, timers/promises' setTimeout, or a call to a sleep/delay helper.
  {
    kind: 'sleep',
    pattern: /new Promise[^;]*setTimeout\(|await\s+(?:setTimeout|scheduler\.wait)\(|(?<![.\w$])(?:sleep|delay)\s*\(/,
  },
];

/** What a line says, without a trailing `// comment` (a `//` inside a URL has a `:` before it, not a space). */
const code = (line: string) => line.replace(/(^|\s)\/\/.*$/, '$1');

/** The lines of `source` that break the rules; a sleep with `// sleep:` on its line or the one before is fine. */
function findings(source: string): Finding[] {
  const lines = source.split('\n');
  const found: Finding[] = [];
  lines.forEach((line, i) => {
    const text = code(line);
    for (const { kind, pattern } of RULES) {
      if (!pattern.test(text)) continue;
      if (kind === 'sleep' && /\/\/\s*sleep:/.test(`${lines[i - 1] ?? ''}\n${line}`)) continue;
      found.push({ kind, line: i + 1, text: line.trim() });
    }
  });
  return found;
}

const ROOT = new URL('..', import.meta.url).pathname;
/** The one waiting helper, and this file (its planted examples), are what the rules are measured against. */
const EXEMPT = new Set(['test/support/wait.ts', 'test/suite-hygiene.test.ts']);

/** Every TypeScript file of the tests: test/ (support files included) and the examples' tests. */
function sources(): string[] {
  const walk = (dir: string): string[] =>
    readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) return entry.name === 'node_modules' ? [] : walk(path);
      return /\.(ts|mts)$/.test(entry.name) ? [relative(ROOT, path)] : [];
    });
  return [
    ...walk(join(ROOT, 'test')),
    ...walk(join(ROOT, 'examples')).filter((path) => path.endsWith('.test.ts') || path.includes('/test/')),
  ]
    .filter((path) => !EXEMPT.has(path))
    .sort();
}

describe('suite hygiene: waiting done one way', () => {
  it('finds a polling helper, a deadline loop and a bare sleep in planted sources, and lets a sleep that says why pass', () => {
    const planted = [
      'async function until(what: string, check: () => boolean) {', // 1 helper
      'const waitForLine = async (child: Child) => {', // 2 helper
      'export async function pollRows<T>(read: () => T) {', // 3 helper
      '  while (Date.now() < deadline) {', // 4 deadline
      '  if (Date.now() > end) throw new Error("late");', // 5 deadline
      'await new Promise((r) => setTimeout(r, 50));', // 6 sleep
      'await new Promise<void>((resolve) => setTimeout(resolve, 200));', // 7 sleep
      "await setTimeout(100); // from 'node:timers/promises'", // 8 sleep
      'await sleep(250);', // 9 sleep
      'await delay(10);', // 10 sleep
      '// sleep: the lease is 100 ms and must run out, which is what this test is about', // 11
      'await sleep(150);', // 12 fine: the line before says why
      'await sleep(150); // sleep: a duration past the window is the point', // 13 fine
      'const timer = setTimeout(() => child.kill(), 5_000);', // 14 fine: a timer, not a wait
      'const wait = backoff.delay(3);', // 15 fine: a method named delay
      'await flush(); // not sleep(100): a comment', // 16 fine
      "const url = 'http://127.0.0.1:8080/'; // the gateway", // 17 fine
      'const retryDelay = nextDelay(attempt);', // 18 fine
      'await until("the row", () => read());', // 19 fine: the one helper
      'const until = Date.now() + 3_000;', // 20 fine alone: the loop that reads it is what counts
      '  while (Date.now() < until) await charge();', // 21 fine: load for a duration, no wait
      'const waiting = once.run({ action, key, wait: "5s" }, fn);', // 22 fine
    ].join('\n');
    expect(findings(planted).map(({ kind, line }) => `${line} ${kind}`)).toEqual([
      '1 helper',
      '2 helper',
      '3 helper',
      '4 deadline',
      '5 deadline',
      '6 sleep',
      '7 sleep',
      '8 sleep',
      '9 sleep',
      '10 sleep',
    ]);
  });

  it('no test file waits by its own helper, a deadline loop or a sleep that does not say why', () => {
    const paths = sources();
    // The walk itself is checked: an empty list would make this test pass on nothing.
    expect(paths).toContain('test/support/redis.ts');
    expect(paths.filter((path) => path.endsWith('.test.ts')).length).toBeGreaterThan(100);
    const offenders = paths.flatMap((path) =>
      findings(readFileSync(join(ROOT, path), 'utf8')).map((f) => `${path}:${f.line}: ${f.kind}: ${f.text}`),
    );
    expect(
      offenders,
      'wait with until() from test/support/wait.ts; a sleep whose duration is the point gets "// sleep: why"',
    ).toEqual([]);
  });
});

describe('until', () => {
  it('returns the first value done accepts, reading again after a throw', async () => {
    let reads = 0;
    const value = await until(
      'the third read',
      () => {
        reads += 1;
        if (reads === 1) throw new Error('not yet');
        return reads;
      },
      (n) => n >= 3,
      { intervalMs: 1 },
    );
    expect(value).toBe(3);
    expect(reads).toBe(3);
  });

  it('by default waits for a truthy value', async () => {
    let reads = 0;
    expect(await until('a truthy read', () => (++reads >= 2 ? 'yes' : ''), undefined, { intervalMs: 1 })).toBe('yes');
  });

  it('on timeout names what it waited for and the last value, as JSON cut short', async () => {
    const long = { rows: Array.from({ length: 200 }, (_, i) => ({ id: i })) };
    const error = await until(
      '200 rows to be gone',
      () => long,
      () => false,
      { timeoutMs: 30, intervalMs: 5 },
    ).catch((e: Error) => e);
    expect(error).toBeInstanceOf(Error);
    const message = (error as Error).message;
    expect(message).toMatch(/^timed out after 30 ms waiting for 200 rows to be gone; last seen: \{"rows":\[\{"id":0\}/);
    expect(message).toMatch(/… \(\d+ characters\)$/);
    expect(message.length).toBeLessThan(650);
  });

  it('on timeout names the last error read threw', async () => {
    const error = await until(
      'the service',
      () => {
        throw new Error('ECONNREFUSED 127.0.0.1:6379');
      },
      undefined,
      { timeoutMs: 20, intervalMs: 5 },
    ).catch((e: Error) => e);
    expect((error as Error).message).toBe(
      'timed out after 20 ms waiting for the service; last seen: an error: ECONNREFUSED 127.0.0.1:6379',
    );
  });
});
