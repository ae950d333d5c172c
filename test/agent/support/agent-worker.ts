/**
 * A separate process that runs the agent runtime against a shared backend, driven by
 * test/agent/processes.test.ts; it also exports the tool and backend helpers both sides use.
 * Modes (a JSON job in argv[2]):
 * - burst: prints "ready", waits for "go" on stdin, makes `calls` concurrent calls of one intent
 *   and prints a JSON line of the envelopes' states (and the attempt that executed, in `data`).
 * - hang: calls the tool once; its execute sends the e-mail downstream, prints "sent" and never
 *   returns, so the test can kill the process after the send and before the record is written.
 * Both call `tool` (the permanent sendReviewNotice, or the finite-TTL sendDigest) with `input`.
 */
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';
import Database from 'better-sqlite3';
import { z } from 'zod';
import { reviewNotice } from '../../../examples/agent/tools.js';
import { type AgentRuntime, createAgentRuntime, defineTool } from '../../../src/agent/index.js';
import { openDb } from '../../../src/db/index.js';
import type { Db } from '../../../src/db/types.js';
import { createOncely, type Oncely } from '../../../src/index.js';
import { postgresStore } from '../../../src/postgres/index.js';
import { sqliteStore } from '../../../src/sqlite/index.js';

/** Where the engine's records and the agent's tables live; serialisable for the command line. */
export type Backend = { kind: 'sqlite'; path: string } | { kind: 'postgres'; url: string; schema: string };

export interface Job {
  mode: 'burst' | 'hang';
  /** The tool called: the permanent sendReviewNotice (default) or the finite-TTL sendDigest. */
  tool?: ToolName;
  /** Its input; default the tool's own (NOTICE, DIGEST). */
  input?: Record<string, unknown>;
  backend: Backend;
  tenant: string;
  /** SQLite file of the downstream mailer. */
  sink: string;
  calls?: number;
  /** The engine's lease in ms. */
  lease?: number;
  reservationTtl?: number;
}

/** The runtime over a backend: engine store and agent Db, the same SQLite file or PostgreSQL schema. */
export async function openAgent(
  backend: Backend,
  options: { tenant: string; sink: string; lease?: number; reservationTtl?: number; hang?: () => Promise<void> },
): Promise<{ agent: AgentRuntime; once: Oncely; db: Db; close(): Promise<void> }> {
  const store =
    backend.kind === 'sqlite'
      ? sqliteStore({ path: backend.path })
      : postgresStore({ connectionString: backend.url, schema: backend.schema });
  const once = await createOncely({ store, defaults: { lease: options.lease ?? 30_000 } });
  const db = await openDb(backend.kind === 'sqlite' ? backend.path : `${backend.url}?schema=${backend.schema}`);
  const agent = await createAgentRuntime({
    once,
    db,
    tenant: options.tenant,
    reservationTtl: options.reservationTtl,
    tools: [reviewNoticeTool(options.sink, options.hang), digestTool(options.sink, options.hang)],
  });
  return {
    agent,
    once,
    db,
    close: async () => {
      await once.close();
      await db.close();
    },
  };
}

/** Creates the downstream mailer's tables: e-mails deduped on the idempotency key, and every delivery attempt. */
export function createSink(path: string): void {
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.exec(`CREATE TABLE emails (idempotency_key TEXT PRIMARY KEY, recipient TEXT NOT NULL, body TEXT NOT NULL, sent_by TEXT NOT NULL);
           CREATE TABLE deliveries (id INTEGER PRIMARY KEY AUTOINCREMENT, idempotency_key TEXT NOT NULL, sent_by TEXT NOT NULL, attempt INTEGER NOT NULL)`);
  db.close();
}

/** The downstream mailer: dedupes on the key it is given (as a real provider would) and logs every attempt. */
function deliver(sink: string, key: string, to: string, body: string, attempt: number): void {
  const db = new Database(sink);
  db.pragma('busy_timeout = 5000');
  const by = `pid ${process.pid}`;
  db.prepare('INSERT OR IGNORE INTO emails (idempotency_key, recipient, body, sent_by) VALUES (?, ?, ?, ?)').run(
    key,
    to,
    body,
    by,
  );
  db.prepare('INSERT INTO deliveries (idempotency_key, sent_by, attempt) VALUES (?, ?, ?)').run(key, by, attempt);
  db.close();
}

/** The sendReviewNotice, sending through the SQLite mailer; `hang` runs after the send. */
export function reviewNoticeTool(sink: string, hang?: () => Promise<void>) {
  return defineTool({
    ...reviewNotice,
    description: 'Sends the review notice of a task version to one recipient.',
    execute: async (input, ctx) => {
      deliver(sink, ctx.idempotencyKey, input.recipientId, input.body, ctx.attempt);
      if (hang) await hang();
      // sleep: the send takes a while, so a burst's duplicates meet it in progress.
      else await new Promise((r) => setTimeout(r, 300));
      return { to: input.recipientId, by: process.pid, attempt: ctx.attempt };
    },
  });
}

/** How long a digest's record answers duplicates: long enough for a burst, short enough to expire in a test. */
export const DIGEST_TTL_MS = 2000;

/**
 * A finite-TTL tool with a cost: a task's digest to one recipient, one per run. Its record expires
 * after DIGEST_TTL_MS; the run id makes a later run a new action, charged anew, while the same run
 * id again is the same action, charged once ever.
 */
export function digestTool(sink: string, hang?: () => Promise<void>) {
  return defineTool({
    name: 'sendDigest',
    description: "Sends the digest of a task's run to one recipient.",
    input: z.object({ taskId: z.string(), recipientId: z.string(), runId: z.string(), body: z.string() }),
    idempotency: {
      keyFields: ['taskId', 'recipientId'],
      fingerprintFields: ['taskId', 'recipientId', 'runId'],
      actionFields: ['runId'],
      ttl: `${DIGEST_TTL_MS}ms`,
    },
    cost: { credits: 1, account: (ctx) => ctx.tenant },
    execute: async (input, ctx) => {
      deliver(sink, `${ctx.idempotencyKey}:${input.runId}`, input.recipientId, input.body, ctx.attempt);
      if (hang) await hang();
      // sleep: the send takes a while, so a burst's duplicates meet it in progress.
      else await new Promise((r) => setTimeout(r, 300));
      return { to: input.recipientId, by: process.pid, attempt: ctx.attempt };
    },
  });
}

export type ToolName = 'sendReviewNotice' | 'sendDigest';

export const DIGEST = { taskId: 'T-9', recipientId: 'u-7', runId: 'run-1', body: 'Digest of T-9, run 1.' };

export const NOTICE = {
  taskId: 'T-9',
  recipientId: 'u-7',
  templateId: 'review',
  entityVersion: 2,
  body: 'Task T-9 v2 is ready for your review.',
};

const INPUTS: Record<ToolName, Record<string, unknown>> = { sendReviewNotice: NOTICE, sendDigest: DIGEST };

async function main(job: Job): Promise<void> {
  if (job.mode === 'hang') {
    const { agent } = await openAgent(job.backend, {
      ...job,
      hang: async () => {
        console.log('sent');
        await new Promise(() => {});
      },
    });
    await agent.call(job.tool ?? 'sendReviewNotice', job.input ?? INPUTS[job.tool ?? 'sendReviewNotice']);
    return;
  }
  const { agent, close } = await openAgent(job.backend, job);
  const lines = createInterface({ input: process.stdin });
  console.log('ready');
  await new Promise<void>((resolve) => lines.once('line', () => resolve()));
  lines.close();
  const results = await Promise.all(
    Array.from({ length: job.calls ?? 25 }, () =>
      agent.call(job.tool ?? 'sendReviewNotice', job.input ?? INPUTS[job.tool ?? 'sendReviewNotice']),
    ),
  );
  console.log(
    JSON.stringify(
      results.map((r) => ({
        deliveryState: r.deliveryState,
        actionId: r.actionId,
        error: r.error?.code ?? null,
        attempt: (r.data as { attempt?: number } | null)?.attempt ?? null,
      })),
    ),
  );
  await close();
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href)
  await main(JSON.parse(process.argv[2] ?? '{}') as Job);
