/**
 * Black box: the resident memory of `oncely serve` (the built CLI) after 20,000 events whose types
 * no consumer declares, each as long as a type may be, delivered through a Redis Streams source (a
 * webhook per event commits one transaction each: 20,000 of them take minutes on a shared machine).
 * Measured from /proc, against a baseline taken after as many events of one type, so the growth is
 * what the distinct types cost, not what taking 20,000 events costs.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { MAX_EVENT_TYPE_LENGTH } from '../../src/core/key.js';
import { REDIS_URL } from '../support/redis.js';
import { until } from '../support/wait.js';

const CLI = 'dist/cli/main.js';
const N = 20_000;
// Measured on a shared 2-core machine: before the label bound this run grew by 32-64 MiB (each
// type kept in the process's series and the totals' mirror of them, with its 128 characters); with
// it, by 8-12 MiB (the heap's churn of taking 20,000 events). 24 MiB is twice the worst bounded run
// and under the best unbounded one.
const BOUND_MIB = 24;

const rssMiB = (pid: number) => {
  const kb = Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
  return kb / 1024;
};

describe('oncely serve under 20,000 undeclared event types', () => {
  let server: ChildProcess | undefined;
  const redis = new Redis(REDIS_URL);
  const stream = `oncely-test-rss-${Math.random().toString(36).slice(2, 10)}`;
  afterAll(async () => {
    server?.kill('SIGTERM');
    await redis.del(stream);
    redis.disconnect();
  });

  it('review3.5: resident memory grows less than 24 MiB', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'oncely-rss-'));
    const files: Record<string, string> = {
      'package.json': '{ "type": "module" }\n',
      'oncely.config.ts': `export default {
  brokers: { feed: { kind: 'redis-streams', url: ${JSON.stringify(REDIS_URL)}, stream: ${JSON.stringify(stream)}, group: 'host', capacity: 256 } },
};\n`,
      'consumers/feed/order.paid.ts': 'export function handle() {}\n',
    };
    for (const [name, text] of Object.entries(files)) {
      mkdirSync(join(dir, name, '..'), { recursive: true });
      writeFileSync(join(dir, name), text);
    }
    let stdout = '';
    server = spawn(process.execPath, [CLI, 'serve', '--dir', dir, '--db', join(dir, 'app.db'), '--port', '0']);
    server.stdout?.on('data', (c) => {
      stdout += c;
    });
    await until(
      'the serve banner on stdout',
      () => stdout,
      (out) => /stop with Ctrl-C/.test(out),
      {
        timeoutMs: 20_000,
        intervalMs: 100,
      },
    );
    const base = stdout.match(/on (http:\/\/localhost:\d+)/)?.[1];
    expect(base, `the serve banner (stdout: ${stdout})`).toBeDefined();
    const pid = server.pid as number;

    const accepted = async () =>
      ((await (await fetch(`${base}/v1/events/stats`)).json()) as { data: { accepted: number } }).data.accepted;
    const deliver = async (from: number, type: (i: number) => string) => {
      for (let at = 0; at < N; at += 1_000) {
        const batch = redis.pipeline();
        for (let i = at; i < Math.min(N, at + 1_000); i++)
          batch.xadd(stream, '*', 'id', `e-${from + i}`, 'type', type(i), 'data', '{}');
        await batch.exec();
      }
      await until(`${from + N} events accepted`, accepted, (seen) => seen >= from + N, {
        timeoutMs: 120_000,
        intervalMs: 100,
      });
    };
    // One type for the baseline (no consumer either): what taking 20,000 events costs.
    await deliver(0, () => 'warm.up');
    const before = rssMiB(pid);
    await deliver(N, (i) => `t${i}.`.padEnd(MAX_EVENT_TYPE_LENGTH, 'x'));
    const after = rssMiB(pid);
    expect(await accepted()).toBe(2 * N);
    const grown = after - before;
    console.log(`rss ${before.toFixed(1)} MiB -> ${after.toFixed(1)} MiB (+${grown.toFixed(1)} MiB) after ${N} types`);
    expect(grown).toBeLessThan(BOUND_MIB);
  }, 300_000);
});
