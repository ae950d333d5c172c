/**
 * Multi-agent dispatch, the third way one intent arrives many times: an orchestrator gives the
 * same task to two sub-agents at once (each its own agent runtime, as a framework's agents are),
 * loses the first answer to a timeout and re-dispatches the task to a third.
 * Each sub-agent writes its own body for the notice. One e-mail goes out, one credit is charged,
 * and every sub-agent sees `sent` or `already_sent`, because they call in the business tenant
 * (the organisation the task belongs to). Run with `--scope agent` to see what goes wrong when the
 * scope is each agent's own identity instead: every sub-agent sends its own e-mail.
 * Run: `node --import tsx examples/agent/dispatch.ts [--db <sqlite file>] [--scope tenant|agent]`
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { createOncely, type Oncely } from 'oncely';
import { type AgentRuntime, createAgentRuntime, type ToolEnvelope } from 'oncely/agent';
import { type Db, openDb } from 'oncely/db';
import { sqliteStore } from 'oncely/sqlite';
import { OutboxMailer, sendReviewNotice } from './tools.js';

/** What a dispatch run found. */
export interface DispatchSummary {
  emailsSent: number;
  creditsCharged: number;
  /** What the sub-agents received, by deliveryState (the lost answer included: it arrived, to nobody). */
  states: Record<string, number>;
}

/** Whose scope a call is made in: the business tenant (right) or each agent's identity (the mistake). */
export type Scope = 'tenant' | 'agent';

const CREDITS = 5;
/** The mailer is slower than the orchestrator waits for the first answer. */
const MAILER_DELAY_MS = 150;
const ORCHESTRATOR_TIMEOUT_MS = 50;

/** One sub-agent: a runtime of its own (as each agent of a framework gets) on the shared engine and database. */
async function subAgent(once: Oncely, db: Db, mailer: OutboxMailer, name: string): Promise<SubAgent> {
  return { name, runtime: await createAgentRuntime({ once, db, tools: [sendReviewNotice(mailer)] }) };
}

interface SubAgent {
  name: string;
  runtime: AgentRuntime;
}

/** Runs the dispatch against a SQLite file; `print` gets each transcript line as it happens. */
export async function main(
  options: { db?: string; scope?: Scope; print?: (line: string) => void } = {},
): Promise<{ transcript: string[]; summary: DispatchSummary }> {
  const path = options.db ?? join(mkdtempSync(join(tmpdir(), 'oncely-dispatch-')), 'dispatch.db');
  const scope = options.scope ?? 'tenant';
  const print = options.print ?? (() => {});
  const transcript: string[] = [];
  const line = (text: string) => {
    transcript.push(text);
    print(text);
  };
  // The business tenant: the organisation whose task this is (one per run, so runs never collide).
  const org = `org-${randomUUID().slice(0, 8)}`;
  const tenantOf = (agent: string) => (scope === 'tenant' ? org : `${org}:${agent}`);
  const names = ['drafter', 'reviewer', 'fallback'];
  const once = await createOncely({ store: sqliteStore({ path }) });
  const db = await openDb(path);
  const mailer = new OutboxMailer(db, MAILER_DELAY_MS);
  await mailer.migrate();
  const agents: SubAgent[] = [];
  for (const name of names) agents.push(await subAgent(once, db, mailer, name));
  const [drafter, reviewer, fallback] = agents as [SubAgent, SubAgent, SubAgent];
  const accounts = [...new Set(names.map(tenantOf))];
  for (const account of accounts) await drafter.runtime.credits.grant(account, CREDITS);

  const task = { taskId: 'T-7', recipientId: 'u-3', templateId: 'review', entityVersion: 1 };
  // The orchestrator's run: one trace id for the task, kept on the record whoever sends.
  const traceId = `dispatch-${task.taskId}-${org}`;
  const received: ToolEnvelope[] = [];
  const dispatch = async (agent: SubAgent, body: string) => {
    const result = await agent.runtime.call(
      'sendReviewNotice',
      { ...task, body },
      { tenant: tenantOf(agent.name), traceId },
    );
    received.push(result);
    return result;
  };
  const show = (agent: SubAgent, r: ToolEnvelope) =>
    `${agent.name} -> ${r.deliveryState}, nextAction=${r.nextAction}${r.error ? `, error=${r.error.code}: ${r.error.message}` : ''}, trace ${r.traceId === traceId ? 'kept' : r.traceId}`;

  line(`orchestrator: task ${task.taskId} to ${drafter.name} and ${reviewer.name} at once (scope: ${scope})`);
  const first = dispatch(drafter, 'Please review T-7 (version 1).');
  const second = dispatch(reviewer, 'T-7 v1 is waiting for your review, thanks!');
  const lost = await Promise.race([
    first.then(() => false),
    new Promise<true>((r) => setTimeout(() => r(true), ORCHESTRATOR_TIMEOUT_MS)),
  ]);
  if (lost) line(`orchestrator: no answer from ${drafter.name} after ${ORCHESTRATOR_TIMEOUT_MS}ms; re-dispatching`);
  const third = dispatch(fallback, 'Reminder: T-7 needs your review.');
  line(show(reviewer, await second));
  line(show(fallback, await third));
  line(`${show(drafter, await first)}   [the answer the orchestrator gave up on]`);

  const sent = (await Promise.all(accounts.map((account) => mailer.sent(account)))).flat();
  let charged = 0;
  for (const account of accounts) charged += CREDITS - (await drafter.runtime.credits.balance(account));
  const states: Record<string, number> = {};
  for (const r of received) states[r.deliveryState] = (states[r.deliveryState] ?? 0) + 1;
  const summary = { emailsSent: sent.length, creditsCharged: charged, states };
  line(`summary: emails sent ${summary.emailsSent}, credits charged ${summary.creditsCharged}`);
  for (const email of sent) line(`         e-mail to ${email.recipient}: ${JSON.stringify(email.body)}`);
  await once.close();
  await db.close();
  return { transcript, summary };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const arg = (name: string) => {
    const i = process.argv.indexOf(name);
    return i === -1 ? undefined : process.argv[i + 1];
  };
  await main({ db: arg('--db'), scope: (arg('--scope') as Scope | undefined) ?? 'tenant', print: console.log });
}
