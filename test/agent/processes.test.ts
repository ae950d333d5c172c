/**
 * The proof across processes, on SQLite and PostgreSQL: 4 processes x 25 concurrent calls
 * of one intent execute once and charge one credit; a process killed with SIGKILL after the send
 * and before the record is taken over after its lease, the retry carries the same key downstream,
 * and the dead process's reservation is reused, never doubled nor leaked. The charge invariant
 * with a finite-TTL tool: after its record expired, 4 x 25 calls of the same action neither run
 * nor charge again, across processes and after a SIGKILL.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { startWorker as start } from '../support/spawn.js';
import {
  type Backend,
  createSink,
  DIGEST,
  DIGEST_TTL_MS,
  type Job,
  NOTICE,
  openAgent,
  type ToolName,
} from './support/agent-worker.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const WORKER = fileURLToPath(new URL('./support/agent-worker.ts', import.meta.url));
const KEY = 'sendReviewNotice:T-9:u-7:review:2';
const LEASE = 500;

const startWorker = (job: Job) => start(job, WORKER);

/** A fresh downstream mailer file, and readers of what it holds for a key. */
function makeSink() {
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

function describeProcesses(name: string, backend: () => Backend, cleanup?: () => Promise<void>) {
  describe(`agent tools across processes: ${name}`, () => {
    let spec: Backend;
    beforeAll(() => {
      spec = backend();
    });
    afterAll(async () => {
      await cleanup?.();
    });

    /** The test process's own runtime on the shared backend, with `credits` granted to a fresh tenant. */
    async function local(sink: string, credits: number) {
      const tenant = `procs-${randomUUID().slice(0, 8)}`;
      const opened = await openAgent(spec, { tenant, sink, lease: LEASE });
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
      const workers = Array.from({ length: 4 }, () => startWorker({ mode: 'burst', backend: spec, calls: 25, ...job }));
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
              }[],
          ),
        )
      ).flat();
      await Promise.all(workers.map((w) => w.exited));
      return results;
    }

    it('4 processes x 25 concurrent calls of one intent: one execution, one credit, the rest already_sent', async () => {
      const sink = makeSink();
      const { agent, tenant, reserved, close } = await local(sink.path, 10);
      try {
        const results = await burst({ tenant, sink: sink.path });
        expect(results).toHaveLength(100);
        const states = results.map((r) => r.deliveryState);
        expect(states.filter((s) => s === 'sent')).toHaveLength(1);
        expect(states.filter((s) => s === 'already_sent')).toHaveLength(99);
        expect(new Set(results.map((r) => r.actionId)).size).toBe(1);
        expect(sink.deliveries()).toHaveLength(1);
        expect(sink.emails(KEY)).toHaveLength(1);
        expect(await agent.credits.balance(tenant)).toBe(9);
        expect(await agent.credits.reservation(results[0]?.actionId as string)).toMatchObject({
          status: 'confirmed',
          credits: 1,
        });
        expect(await reserved()).toBe(0);
      } finally {
        await close();
      }
    });

    async function crashAfterSend(options: { reservationTtl?: number; tool?: ToolName } = {}) {
      const sink = makeSink();
      const opened = await local(sink.path, 10);
      const worker = startWorker({
        mode: 'hang',
        tool: options.tool,
        backend: spec,
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

    it('SIGKILL after the send, before the record: the retry carries the same key, one e-mail, one credit', async () => {
      const { sink, agent, tenant, reserved, close } = await crashAfterSend();
      try {
        // Called at once: the runtime waits out the dead holder's lease, then takes over.
        const started = Date.now();
        const retried = await agent.call('sendReviewNotice', NOTICE);
        expect(retried).toMatchObject({
          success: true,
          deliveryState: 'sent',
          idempotencyKey: KEY,
          data: { attempt: 2, by: process.pid },
        });
        expect(Date.now() - started).toBeLessThan(LEASE + 5_000);
        // Downstream: two delivery attempts with the same key, one e-mail (the dead worker's).
        const deliveries = sink.deliveries();
        expect(deliveries.map((d) => [d.idempotency_key, d.attempt])).toEqual([
          [KEY, 1],
          [KEY, 2],
        ]);
        expect(deliveries[1]?.sent_by).toBe(`pid ${process.pid}`);
        const emails = sink.emails(KEY);
        expect(emails).toHaveLength(1);
        expect(emails[0]?.sent_by).toBe(deliveries[0]?.sent_by);
        // The dead worker's reservation was reused and confirmed: one credit, nothing left reserved.
        expect(await agent.credits.balance(tenant)).toBe(9);
        expect(await agent.credits.reservation(retried.actionId as string)).toMatchObject({ status: 'confirmed' });
        expect(await reserved()).toBe(0);
        expect(await agent.call('sendReviewNotice', NOTICE)).toMatchObject({
          deliveryState: 'already_sent',
          firstExecutedAt: retried.firstExecutedAt,
        });
        expect(sink.deliveries()).toHaveLength(2);
        expect(await agent.credits.balance(tenant)).toBe(9);
      } finally {
        await close();
      }
    });

    it('SIGKILL after the send, the sweep releases the dead reservation, then the retry: still one credit', async () => {
      const { sink, agent, tenant, reserved, close } = await crashAfterSend({ reservationTtl: 100 });
      try {
        await new Promise((r) => setTimeout(r, 150));
        expect(await agent.credits.sweep()).toBeGreaterThanOrEqual(1);
        expect(await agent.credits.balance(tenant)).toBe(10);
        expect(await reserved()).toBe(0);
        const retried = await agent.call('sendReviewNotice', NOTICE);
        expect(retried).toMatchObject({ deliveryState: 'sent', data: { attempt: 2 } });
        expect(sink.emails(KEY)).toHaveLength(1);
        expect(sink.deliveries()).toHaveLength(2);
        expect(await agent.credits.balance(tenant)).toBe(9);
        expect(await agent.credits.reservation(retried.actionId as string)).toMatchObject({ status: 'confirmed' });
        expect(await reserved()).toBe(0);
      } finally {
        await close();
      }
    });

    // The charge invariant with a finite TTL: the record expires, the action's charge does not.
    it('a finite-TTL tool: after its record expired, 4 x 25 calls of the action neither run nor charge again; a new run id charges once', async () => {
      const sink = makeSink();
      const { agent, tenant, reserved, close } = await local(sink.path, 10);
      try {
        const first = await agent.call('sendDigest', DIGEST);
        expect(first.deliveryState).toBe('sent');
        expect(await agent.credits.balance(tenant)).toBe(9);
        await sleep(DIGEST_TTL_MS + 300);
        // Expired: every process may claim the key again, and each finds the action charged.
        const after = await burst({ tenant, sink: sink.path, tool: 'sendDigest' });
        expect(after.map((r) => r.deliveryState)).toEqual(Array(100).fill('already_sent'));
        expect(new Set(after.map((r) => r.actionId))).toEqual(new Set([first.actionId]));
        expect(sink.deliveries()).toHaveLength(1);
        expect(await agent.credits.balance(tenant)).toBe(9);
        // Another run is another action: one execution, one more credit.
        const next = await agent.call('sendDigest', { ...DIGEST, runId: 'run-2' });
        expect(next).toMatchObject({ deliveryState: 'sent' });
        expect(next.actionId).not.toBe(first.actionId);
        expect(sink.deliveries()).toHaveLength(2);
        expect(await agent.credits.balance(tenant)).toBe(8);
        expect(await reserved()).toBe(0);
      } finally {
        await close();
      }
    });

    it('SIGKILL after the send of a finite-TTL tool: the takeover charges once; after expiry the action is not charged again', async () => {
      const { sink, agent, tenant, reserved, close } = await crashAfterSend({ tool: 'sendDigest' });
      try {
        const retried = await agent.call('sendDigest', DIGEST);
        expect(retried).toMatchObject({ deliveryState: 'sent', data: { attempt: 2 } });
        expect(sink.deliveries().map((d) => d.attempt)).toEqual([1, 2]);
        expect(await agent.credits.balance(tenant)).toBe(9);
        expect(await reserved()).toBe(0);
        await sleep(DIGEST_TTL_MS + 300);
        const later = await agent.call('sendDigest', DIGEST);
        expect(later).toMatchObject({ deliveryState: 'already_sent', actionId: retried.actionId, data: null });
        expect(sink.deliveries()).toHaveLength(2);
        expect(await agent.credits.balance(tenant)).toBe(9);
      } finally {
        await close();
      }
    });
  });
}

describeProcesses('sqlite', () => ({
  kind: 'sqlite',
  path: join(mkdtempSync(join(tmpdir(), 'oncely-agent-proc-')), 'shared.db'),
}));

const schema = freshSchema();
describeProcesses(
  'postgres',
  () => ({ kind: 'postgres', url: POSTGRES_URL, schema }),
  () => dropSchema(schema),
);
