/**
 * The credit ledger on SQLite and PostgreSQL: a tool that runs past its reservation never takes
 * the balance below zero (review3.11), and a keyed grant credits once, across processes (review3.15).
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createAgentRuntime, defineTool } from '../../src/agent/index.js';
import { openDb } from '../../src/db/index.js';
import type { Db } from '../../src/db/types.js';
import { createOncely, type Oncely } from '../../src/index.js';
import { postgresStore } from '../../src/postgres/index.js';
import { Metrics, rateTotals } from '../../src/prometheus/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';
import { type ManualClock, manualClock } from '../../src/testing/manual-clock.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { startWorker } from '../support/spawn.js';
import { type StoreName, selectStores } from '../support/store-filter.js';
import { until } from '../support/wait.js';

const GRANT_WORKER = fileURLToPath(new URL('./support/grant-worker.ts', import.meta.url));

interface Backend {
  once: Oncely;
  db: Db;
  clock: ManualClock;
  /** The agent Db as another process opens it. */
  target: string;
  close(): Promise<void>;
}

const BACKENDS = selectStores<{ name: StoreName; title: string; open(): Promise<Backend> }>([
  {
    name: 'sqlite',
    title: 'SQLite',
    async open() {
      const path = join(mkdtempSync(join(tmpdir(), 'oncely-credits-')), 'agent.db');
      const clock = manualClock();
      const once = await createOncely({ store: sqliteStore({ path, clock }), clock });
      const db = await openDb(path);
      const close = async () => {
        await once.close();
        await db.close();
      };
      return { once, db, clock, target: path, close };
    },
  },
  {
    name: 'postgres',
    title: 'PostgreSQL',
    async open() {
      const schema = freshSchema();
      const clock = manualClock();
      const once = await createOncely({ store: postgresStore({ connectionString: POSTGRES_URL, schema }), clock });
      const target = `${POSTGRES_URL}?schema=${schema}`;
      const db = await openDb(target);
      return {
        once,
        db,
        clock,
        target,
        close: async () => {
          await once.close();
          await db.close();
          await dropSchema(schema);
        },
      };
    },
  },
]);

for (const { title, open } of BACKENDS)
  describe(`credits: ${title}`, () => {
    let backend: Backend;
    beforeAll(async () => {
      backend = await open();
    }, 30_000);
    afterAll(() => backend?.close());

    it('review3.11: a tool running past its reservation never takes the balance below zero', async () => {
      const tenant = `long-${randomUUID().slice(0, 8)}`;
      // Each job runs until the test lets it finish.
      const gates = new Map<string, () => void>();
      const longJob = defineTool({
        name: 'longJob',
        description: 'Runs a long export.',
        input: z.object({ jobId: z.string() }),
        idempotency: { keyFields: ['jobId'], ttl: 'permanent' },
        cost: { credits: 1, account: (ctx) => ctx.tenant },
        execute: (input) =>
          new Promise<{ done: string }>((resolve) => gates.set(input.jobId, () => resolve({ done: input.jobId }))),
      });
      const agent = await createAgentRuntime({ once: backend.once, db: backend.db, tools: [longJob], tenant });
      await agent.credits.grant(tenant, 1, { key: 'opening' });

      const slow = agent.call('longJob', { jobId: 'J-1' });
      await until('J-1 to run, its credit reserved', async () => gates.has('J-1'));
      expect(await agent.credits.balance(tenant)).toBe(0);
      // Past the default reservationTtl of 15 minutes, with J-1 still running: the sweep gives its credit back.
      backend.clock.advance('16m');
      expect(await agent.credits.sweep(backend.clock.now())).toBeGreaterThanOrEqual(1);
      expect(await agent.credits.balance(tenant)).toBe(1);
      // Another call spends it.
      const quick = agent.call('longJob', { jobId: 'J-2' });
      await until('J-2 to run', async () => gates.has('J-2'));
      gates.get('J-2')?.();
      expect(await quick).toMatchObject({ success: true, deliveryState: 'sent' });
      expect(await agent.credits.balance(tenant)).toBe(0);

      // J-1 ends: its confirm finds the credit gone and charges nothing rather than go below zero.
      gates.get('J-1')?.();
      const late = await slow;
      expect(late).toMatchObject({ success: false, error: { code: 'RESERVATION_EXPIRED' } });
      expect(await agent.credits.balance(tenant)).toBe(0);
      expect(await agent.credits.reservation(late.actionId as string)).toMatchObject({ status: 'released' });
      expect(await agent.credits.chargedAt(late.actionId as string)).toBeNull();
      const [row] = await backend.db.all<{ balance: number | string }>(
        'SELECT balance FROM oncely_credit_accounts WHERE account = ?',
        [tenant],
      );
      expect(Number(row?.balance)).toBe(0);
    }, 60_000);

    it("review3.12: a failed call's reservation given back counts as a compensation of the four rates", async () => {
      const tenant = `comp-${randomUUID().slice(0, 8)}`;
      const flaky = defineTool({
        name: 'flakyExport',
        description: 'Exports, and fails.',
        input: z.object({ jobId: z.string() }),
        idempotency: { keyFields: ['jobId'], ttl: 'permanent' },
        cost: { credits: 2, account: (ctx) => ctx.tenant },
        execute: async () => {
          throw new Error('export service down');
        },
      });
      const metrics = new Metrics();
      const agent = await createAgentRuntime({ once: backend.once, db: backend.db, tools: [flaky], tenant, metrics });
      await agent.credits.grant(tenant, 2, { key: 'opening' });
      expect(await agent.call('flakyExport', { jobId: 'J-9' })).toMatchObject({ success: false });
      expect(await agent.credits.balance(tenant)).toBe(2);
      expect(metrics.value('oncely_compensations_total', ['tool', 'flakyExport', 'succeeded'])).toBe(1);
      expect(rateTotals(metrics)).toMatchObject({ compensationsSucceeded: 1, compensations: 1 });
    });

    it('review3.15: a top-up retried with its key credits once, across two processes; another amount is KEY_REUSED', async () => {
      const agent = await createAgentRuntime({ once: backend.once, db: backend.db, tools: [] });
      const account = `topup-${randomUUID().slice(0, 8)}`;
      // The seeds' example: add 100, twice.
      expect(await agent.credits.grant(account, 100, { key: 'invoice-42' })).toBe(100);
      expect(await agent.credits.grant(account, 100, { key: 'invoice-42' })).toBe(100);
      const reused = await agent.credits.grant(account, 50, { key: 'invoice-42' }).catch((e) => e);
      expect(reused.code).toBe('KEY_REUSED');
      expect(await agent.credits.balance(account)).toBe(100);
      // Keys are per account; the same key on another account is its own grant.
      expect(await agent.credits.grant(`${account}-b`, 7, { key: 'invoice-42' })).toBe(7);
      for (const bad of ['', 'a\u0000b'])
        expect((await agent.credits.grant(account, 1, { key: bad }).catch((e) => e)).code).toMatch(/^KEY_/);

      // Two processes retry one top-up side by side, three times each.
      const job = { target: backend.target, account, credits: 100, key: 'invoice-43', times: 3 };
      const workers = [startWorker(job, GRANT_WORKER), startWorker(job, GRANT_WORKER)];
      for (const w of workers) await w.waitFor('ready');
      for (const w of workers) w.child.stdin.end('go\n');
      const answers = await Promise.all(workers.map(async (w) => JSON.parse(await w.waitFor('[')) as unknown[]));
      for (const w of workers) expect((await w.exited).code).toBe(0);
      expect(answers.flat()).toEqual(Array(6).fill(200));
      expect(await agent.credits.balance(account)).toBe(200);
      // And another process with another amount for that key credits nothing.
      const other = startWorker({ ...job, credits: 10, times: 1 }, GRANT_WORKER);
      await other.waitFor('ready');
      other.child.stdin.end('go\n');
      expect(JSON.parse(await other.waitFor('['))).toEqual(['KEY_REUSED']);
      expect(await agent.credits.balance(account)).toBe(200);
    }, 60_000);
  });
