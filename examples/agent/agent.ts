/**
 * A scripted "agent" (no model: a script of the tool calls a model makes on a bad day) calling
 * sendReviewNotice through oncely's agent runtime: a call whose answer is lost to a timeout and
 * retried, three identical calls in parallel, a duplicate, and a rephrased body. It prints one
 * transcript line per call and a summary: one e-mail sent, one credit charged, the rest
 * `already_sent`. Run: `node --import tsx examples/agent/agent.ts [--db <sqlite file | postgres://...?schema=x>]`
 * (default: a fresh SQLite file in the temp directory).
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { createOncely, type RecordStore } from 'oncely';
import { createAgentRuntime, createRegistry, type ToolEnvelope } from 'oncely/agent';
import { openDb } from 'oncely/db';
import { postgresStore } from 'oncely/postgres';
import { sqliteStore } from 'oncely/sqlite';
import { OutboxMailer, sendReviewNotice } from './tools.js';

/** What the run found. */
export interface AgentSummary {
  calls: number;
  emailsSent: number;
  creditsCharged: number;
  /** Envelopes the agent received, by deliveryState (the lost one is not among them). */
  states: Record<string, number>;
}

export interface AgentRun {
  transcript: string[];
  summary: AgentSummary;
}

const CREDITS = 5;
/** How long the agent waits for a tool's answer before it gives up on it. */
const AGENT_TIMEOUT_MS = 100;
/** How long the mailer takes: longer than the agent waits, so the first answer is lost. */
const MAILER_DELAY_MS = 300;

function storeFor(target: string): RecordStore {
  if (!/^postgres(ql)?:\/\//.test(target)) return sqliteStore({ path: target });
  const url = new URL(target);
  const schema = url.searchParams.get('schema') ?? 'public';
  url.searchParams.delete('schema');
  return postgresStore({ connectionString: url.toString(), schema });
}

/** Runs the script against `db` (a SQLite file or a postgres:// URL); `print` gets each line as it happens. */
export async function main(options: { db?: string; print?: (line: string) => void } = {}): Promise<AgentRun> {
  const target = options.db ?? join(mkdtempSync(join(tmpdir(), 'oncely-agent-example-')), 'agent.db');
  const print = options.print ?? (() => {});
  // A tenant of its own per run, so runs on one database never see each other's keys or credits.
  const tenant = `example-${randomUUID().slice(0, 8)}`;
  const once = await createOncely({ store: storeFor(target) });
  const db = await openDb(target);
  const mailer = new OutboxMailer(db, MAILER_DELAY_MS);
  await mailer.migrate();
  const tools = [sendReviewNotice(mailer)];
  const agent = await createAgentRuntime({ once, db, tools, tenant });
  await agent.credits.grant(tenant, CREDITS);

  const transcript: string[] = [];
  const received: ToolEnvelope[] = [];
  const line = (text: string) => {
    transcript.push(text);
    print(text);
  };
  for (const tool of createRegistry(tools).describe())
    line(
      `tool offered to the model: ${tool.name} (key: ${tool.keyFields.join(', ')}; cost: ${tool.cost?.credits ?? 0} credit)`,
    );

  let n = 0;
  const show = (args: Record<string, unknown>) =>
    `sendReviewNotice(${Object.entries(args)
      .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
      .join(', ')})`;
  const answer = (r: ToolEnvelope) =>
    `${r.deliveryState}, nextAction=${r.nextAction}${r.error ? `, error=${r.error.code}` : ''}`;
  /** One call as the model makes it: the transcript shows the call, deliveryState and nextAction. */
  const call = async (args: Record<string, unknown>, why: string) => {
    const id = ++n;
    const result = await agent.call('sendReviewNotice', args);
    received.push(result);
    line(`#${id} ${show(args)} -> ${answer(result)}   [${why}]`);
    return result;
  };

  const notice = {
    taskId: 'T-1',
    recipientId: 'u-42',
    templateId: 'review',
    entityVersion: 3,
    body: 'Task T-1 (version 3) is ready for your review.',
  };

  // 1. The first call takes longer than the agent waits: the answer is lost, the model thinks it failed.
  const lostId = ++n;
  const lost = agent.call('sendReviewNotice', notice);
  const timedOut = await Promise.race([
    lost.then(() => false),
    new Promise<true>((r) => setTimeout(() => r(true), AGENT_TIMEOUT_MS)),
  ]);
  line(
    `#${lostId} ${show(notice)} -> ${timedOut ? `(no answer after ${AGENT_TIMEOUT_MS}ms: the model assumes it failed)` : answer(await lost)}   [first try]`,
  );
  if (!timedOut) received.push(await lost);

  // 2. It retries the same call: oncely waits for the first execution and answers with its result.
  await call(notice, 'retry after the timeout');

  // 3. It emits the same tool call three times in one turn, executed in parallel.
  await Promise.all([1, 2, 3].map((i) => call(notice, `parallel identical call ${i}/3`)));

  // 4. It asks again, to be sure.
  await call(notice, 'duplicate');

  // 5. It "repairs" the notice with a rephrased body: same task, recipient, template and version.
  await call({ ...notice, body: 'Hi! Version 3 of T-1 awaits your review, thanks.' }, 'rephrased body');

  // The lost answer did arrive eventually, to nobody: it was the one 'sent'.
  if (timedOut) line(`#${lostId} (its answer, which the model never saw) -> ${answer(await lost)}`);

  const sent = await mailer.sent(tenant);
  const states: Record<string, number> = {};
  for (const r of received) states[r.deliveryState] = (states[r.deliveryState] ?? 0) + 1;
  const summary: AgentSummary = {
    calls: n,
    emailsSent: sent.length,
    creditsCharged: CREDITS - (await agent.credits.balance(tenant)),
    states,
  };
  line(`summary: ${summary.calls} calls, emails sent ${summary.emailsSent}, credits charged ${summary.creditsCharged}`);
  line(
    `         the model saw: ${Object.entries(states)
      .map(([s, count]) => `${s} x${count}`)
      .join(', ')}`,
  );
  line(`         e-mail: to ${sent[0]?.recipient}: ${JSON.stringify(sent[0]?.body)}`);
  await once.close();
  await db.close();
  return { transcript, summary };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const at = process.argv.indexOf('--db');
  const { summary } = await main({ db: at > 0 ? process.argv[at + 1] : undefined, print: console.log });
  if (summary.emailsSent !== 1 || summary.creditsCharged !== 1) process.exitCode = 1;
}
