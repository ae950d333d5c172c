/**
 * Example tools and a SQLite-backed runtime for the adapter tests (MCP and AI SDK): a mailer that
 * records every send (no dedupe of its own), a notice tool, the same notice behind an approval, a
 * note tool whose key field is optional in its schema so KEY_REQUIRED is reachable, and a read-only
 * lookup.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { type AgentRuntime, type AnyTool, createAgentRuntime, defineTool } from '../../src/agent/index.js';
import { openDb } from '../../src/db/index.js';
import { createOncely } from '../../src/index.js';
import { postgresStore } from '../../src/postgres/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';

export const TENANT = 'acme';

/** A downstream mailer: it sends whatever it is asked to, so any duplicate shows. */
export class Mailer {
  readonly sent: { to: string; body: string; idempotencyKey: string }[] = [];
  /** How often lookupTask ran: a read-only tool runs on every call. */
  lookups = 0;
  constructor(private readonly delayMs = 0) {}
  async send(to: string, body: string, idempotencyKey: string) {
    // sleep: a slow mailer, so duplicates meet its send in progress.
    if (this.delayMs) await new Promise((r) => setTimeout(r, this.delayMs));
    this.sent.push({ to, body, idempotencyKey });
    return { messageId: `msg-${this.sent.length}` };
  }
}

const noticeInput = z.object({
  taskId: z.string(),
  recipientId: z.string(),
  templateId: z.string(),
  entityVersion: z.number(),
  body: z.string().describe('The text of the notice'),
});

/** The tools, bound to one mailer. */
export function exampleTools(mailer: Mailer) {
  const sendReviewNotice = defineTool({
    name: 'sendReviewNotice',
    description: 'Sends a review notice to the recipient of a task.',
    input: noticeInput,
    idempotency: { keyFields: ['taskId', 'recipientId', 'templateId', 'entityVersion'], ttl: 'permanent' },
    outbound: { preview: (i) => ({ to: i.recipientId, body: i.body }) },
    cost: { credits: 1, account: (ctx) => ctx.tenant },
    execute: (input, ctx) => mailer.send(input.recipientId, input.body, ctx.idempotencyKey),
  });
  const sendApprovedNotice = defineTool({
    name: 'sendApprovedNotice',
    description: 'Sends a review notice once a person approved its exact content.',
    input: noticeInput,
    idempotency: { keyFields: ['taskId', 'recipientId', 'templateId', 'entityVersion'], ttl: 'permanent' },
    outbound: { preview: (i) => ({ to: i.recipientId, body: i.body }), approval: 'required' },
    execute: (input, ctx) => mailer.send(input.recipientId, input.body, ctx.idempotencyKey),
  });
  const addNote = defineTool({
    name: 'addNote',
    description: 'Adds a note to a task.',
    input: z.object({ noteId: z.string().optional(), text: z.string() }),
    idempotency: { keyFields: ['noteId'], ttl: '1h' },
    destructive: false,
    execute: (input) => ({ noted: input.text }),
  });
  const lookupTask = defineTool({
    name: 'lookupTask',
    description: 'Reads the status of a task.',
    input: z.object({ taskId: z.string() }),
    readOnly: true,
    execute: (input) => ({ taskId: input.taskId, status: 'in_review', lookups: ++mailer.lookups }),
  });
  return { sendReviewNotice, sendApprovedNotice, addNote, lookupTask };
}

/** Where an adapter test's runtime keeps records, approvals and credits. */
export type BackendKind = 'sqlite' | 'postgres';

/**
 * A runtime over one temporary SQLite file or a fresh PostgreSQL schema (engine records, approvals
 * and credits), with credits granted to TENANT.
 */
export async function openRuntime(
  tools: readonly AnyTool[],
  kind: BackendKind = 'sqlite',
): Promise<{ runtime: AgentRuntime; close(): Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), 'oncely-agent-adapter-'));
  const schema = freshSchema();
  const path = join(dir, 'agent.db');
  const once = await createOncely({
    store: kind === 'sqlite' ? sqliteStore({ path }) : postgresStore({ connectionString: POSTGRES_URL, schema }),
  });
  const db = await openDb(kind === 'sqlite' ? path : `${POSTGRES_URL}?schema=${schema}`);
  const runtime = await createAgentRuntime({ once, db, tools, tenant: TENANT });
  await runtime.credits.grant(TENANT, 10);
  return {
    runtime,
    close: async () => {
      await once.close();
      await db.close();
      if (kind === 'postgres') await dropSchema(schema);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A notice input; `over` changes fields. */
export function notice(over: Partial<z.input<typeof noticeInput>> = {}) {
  return {
    taskId: 'T-1',
    recipientId: 'u-42',
    templateId: 'review',
    entityVersion: 3,
    body: 'Please review task T-1.',
    ...over,
  };
}

/** A tool whose input is a hand-written Standard Schema with no JSON Schema: advertised as an open object. */
export const pingTool = defineTool<{ ref: string }, { pong: string }>({
  name: 'ping',
  description: 'Pings a reference.',
  input: {
    '~standard': {
      validate: (value: unknown) =>
        typeof value === 'object' && value !== null && typeof (value as { ref?: unknown }).ref === 'string'
          ? { value: { ref: (value as { ref: string }).ref } }
          : { issues: [{ message: 'ref must be a string', path: ['ref'] }] },
    },
  },
  idempotency: { keyFields: ['ref'], ttl: '1h' },
  execute: (input) => ({ pong: input.ref }),
});
