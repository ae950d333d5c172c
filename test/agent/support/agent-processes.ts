/**
 * The harness of the agent's process tests (processes.test.ts, processes-charges.test.ts): a
 * downstream mailer file, the test process's own runtime on the shared backend, bursts of 4
 * worker processes, and a worker killed with SIGKILL after its send.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { expect } from 'vitest';
import { startWorker as start } from '../../support/spawn.js';
import { type Backend, createSink, type Job, openAgent, type ToolName } from './agent-worker.js';

const WORKER = fileURLToPath(new URL('./agent-worker.ts', import.meta.url));
/** The engine's lease in every process, in ms: a dead holder's claim is taken over after it. */
export const LEASE = 500;

export const startWorker = (job: Job) => start(job, WORKER);

// sleep: the helper for the waits whose duration is the point (TTLs running out).
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A fresh downstream mailer file, and readers of what it holds for a key. */
export function makeSink() {
  const path = join(mkdtempSync(join(tmpdir(), 'oncely-agent-sink-')), 'mailer.db');
  createSink(path);
  const read = <R>(sql: string, ...params: unknown[]) => {
    const db = new Database(path, { readonly: true });
    try {
      return db.prepare(sql).all(...params) as R[];
    } finally {
      db.close();
    }
  };
  return {
    path,
    emails: (key: string) =>
      read<{ recipient: string; body: string; sent_by: string }>(
        'SELECT recipient, body, sent_by FROM emails WHERE idempotency_key = ?',
        key,
      ),
    deliveries: () => read<{ idempotency_key: string; sent_by: string; attempt: number }>('SELECT * FROM deliveries'),
  };
}

/** The helpers bound to one backend (`spec()` is read when a test runs, after beforeAll set it). */
export function harness(spec: () => Backend) {
  /** The test process's own runtime on the shared backend, with `credits` granted to a fresh tenant. */
  async function local(sink: string, credits: number) {
    const tenant = `procs-${randomUUID().slice(0, 8)}`;
    const opened = await openAgent(spec(), { tenant, sink, lease: LEASE });
    await opened.agent.credits.grant(tenant, credits);
    const reserved = async () =>
      Number(
        (
          await opened.db.all<{ n: number | string }>(
            `SELECT COUNT(*) AS n FROM oncely_credit_reservations WHERE account = ? AND status = 'reserved'`,
            [tenant],
          )
        )[0]?.n,
      );
    return { ...opened, tenant, reserved };
  }

  /** 4 processes, each making 25 concurrent calls of one tool and input, started together. */
  async function burst(job: { tenant: string; sink: string; tool?: ToolName; input?: Record<string, unknown> }) {
    const workers = Array.from({ length: 4 }, () => startWorker({ mode: 'burst', backend: spec(), calls: 25, ...job }));
    await Promise.all(workers.map((w) => w.waitFor('ready')));
    for (const w of workers) w.child.stdin.write('go\n');
    const results = (
      await Promise.all(
        workers.map(
          async (w) =>
            JSON.parse(await w.waitFor('[')) as {
              deliveryState: string;
              actionId: string;
              error: string | null;
              /** The attempt that executed, as the envelope's data says (null for a charged-earlier answer). */
              attempt: number | null;
            }[],
        ),
      )
    ).flat();
    await Promise.all(workers.map((w) => w.exited));
    return results;
  }

  async function crashAfterSend(options: { reservationTtl?: number; tool?: ToolName } = {}) {
    const sink = makeSink();
    const opened = await local(sink.path, 10);
    const worker = startWorker({
      mode: 'hang',
      tool: options.tool,
      backend: spec(),
      tenant: opened.tenant,
      sink: sink.path,
      lease: LEASE,
      reservationTtl: options.reservationTtl,
    });
    await worker.waitFor('sent');
    // The e-mail went out and the worker holds the claim and the reservation; no record of the outcome.
    expect(await opened.agent.credits.balance(opened.tenant)).toBe(9);
    expect(await opened.reserved()).toBe(1);
    worker.child.kill('SIGKILL');
    expect((await worker.exited).signal).toBe('SIGKILL');
    return { sink, worker, ...opened };
  }

  return { local, burst, crashAfterSend };
}
