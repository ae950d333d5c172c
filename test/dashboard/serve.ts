/**
 * What the dashboard's browser tests stand on: a real `oncely serve` (the built CLI) of the app in
 * test/dashboard/app on a database, and the data an operator would look at, made through the app
 * itself: orders with their flows (one failed, one waiting for a signal), payments whose holders were
 * killed with SIGKILL mid-call (so their records are `unknown`; a capture's settled by its reconcile
 * function in an `oncely reconcile` pass), a dead-lettered webhook, a pending approval of an agent
 * tool with a credit account, and a costed tool whose call can be held open (its reservation open).
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { z } from 'zod';
import { type ServeProcess, startServeProcess } from '../../examples/shop/serve-process.js';
import { type AgentRuntime, createAgentRuntime, defineTool, type ToolEnvelope } from '../../src/agent/index.js';
import { openDb } from '../../src/db/index.js';
import type { Db } from '../../src/db/types.js';
import { createOncely } from '../../src/engine/engine.js';
import { createFlows } from '../../src/flows/flows.js';
import { recordStoreFor } from '../../src/host/records.js';
import { until } from '../support/wait.js';

const run = promisify(execFile);
const CLI = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));
const APP = fileURLToPath(new URL('./app', import.meta.url));
export const TOKEN = randomBytes(20).toString('hex');

/** One `oncely serve` process and its base URL. */
export interface Serve extends ServeProcess {
  base: string;
}

/** Starts `oncely serve` of the dashboard app on `db`; resolves once it listens. */
export async function startServe(db: string, ledgerUp: string): Promise<Serve> {
  const env = { ...process.env, ONCELY_ADMIN_TOKEN: TOKEN, DASH_LEDGER_UP: ledgerUp };
  const serve = await startServeProcess(APP, db, env);
  return { ...serve, base: serve.url };
}

/** Stops a serve and resolves once it exited. */
export async function stopServe(serve: Serve | undefined, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (!serve || serve.child.exitCode !== null || serve.child.signalCode !== null) return;
  const exited = new Promise((r) => serve.child.once('exit', r));
  serve.child.kill(signal);
  await exited;
}

/** POST with a JSON body; the answer's status and JSON. */
export async function post(base: string, path: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${base}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  // biome-ignore lint/suspicious/noExplicitAny: answers are read field by field.
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    throw new Error(`${path} answered ${res.status}: ${text}`);
  }
  return { status: res.status, json };
}

export const CHARGE_KEY = 'ORD-U1-charge';
/** A second unknown charge, settled with `oncely records resolve`. */
export const CLI_KEY = 'ORD-U2-charge';
/** An unknown capture, settled by its handler's reconcile function (`oncely reconcile`). */
export const RECONCILED_KEY = 'ORD-U3-capture';
/** Unknown charges settled from the page with an error, and with a retry. */
export const ERROR_KEY = 'ORD-U4-charge';
export const RETRY_KEY = 'ORD-U5-charge';

/** The records left unknown: [handler, order, key]. */
const VICTIMS = [
  ['pay.charge', 'ORD-U1', CHARGE_KEY],
  ['pay.charge', 'ORD-U2', CLI_KEY],
  ['pay.capture', 'ORD-U3', RECONCILED_KEY],
  ['pay.charge', 'ORD-U4', ERROR_KEY],
  ['pay.charge', 'ORD-U5', RETRY_KEY],
] as const;
export const DEAD_EVENT = 'evt-dead-1';
/** A second dead letter, replayed with "Replay all". */
export const DEAD_EVENT_2 = 'evt-dead-2';

/** What the held tool costs, of the account 'acme'. */
export const HELD_CREDITS = 3;

/** The agent side of the data: a tool that needs approval, and how often it really sent. */
export interface AgentSide {
  agent: AgentRuntime;
  sent: string[];
  args: Record<string, unknown>;
  /**
   * Calls `summarizeOrder` (HELD_CREDITS of 'acme') for `orderId`, its execute held open until
   * release(): its credit reservation stays open meanwhile. Resolves when the call ends.
   */
  hold(orderId: string): Promise<ToolEnvelope>;
  /** Lets the held calls end (each confirms its reservation). */
  release(): void;
  close(): Promise<void>;
}

/**
 * Leaves `unknown` records: a serve claims `pay.charge` (or `pay.capture`) under 'hold' (lease 1 s)
 * and is killed with SIGKILL inside the call, once per victim; the first caller after the lease
 * meets OUTCOME_UNKNOWN.
 */
export async function leaveUnknownCharge(db: string, ledgerUp: string, rows: Db): Promise<void> {
  // One victim per charge: on SQLite a hanging handler's transaction holds the write lock.
  for (const [handler, orderId, key] of VICTIMS) {
    const victim = await startServe(db, ledgerUp);
    const headers = { 'idempotency-key': key };
    void post(victim.base, `/v1/invoke/${handler}`, { orderId, hang: true }, headers).catch(() => undefined);
    await until(
      `the victim serve to claim ${key}`,
      () => rows.all<{ state: string }>('SELECT state FROM oncely_records WHERE key = ?', [key]),
      (r) => r[0]?.state === 'in_progress',
    );
    await stopServe(victim, 'SIGKILL');
  }
}

/** Makes what the pages show, through the running serve `base` (and the database `rows`). */
export async function makeData(base: string, rows: Db, ledgerUp: string, db: string): Promise<AgentSide> {
  // Orders, each sent twice (the second is replayed: a duplicate intercepted).
  for (const [orderId, extra] of [
    ['ORD-1', {}],
    ['ORD-2', {}],
    ['ORD-3', { failShip: true }],
    ['ORD-4', { review: true }],
  ] as const)
    for (let i = 0; i < 2; i++) {
      const res = await post(base, '/v1/invoke/orders.create', { orderId, sku: 'TEA-1', ...extra });
      if (res.status !== 200) throw new Error(`orders.create ${orderId}: ${JSON.stringify(res.json)}`);
    }
  // The ledger is down: this payment's event is dead-lettered after its one attempt.
  for (const [id, orderId] of [
    [DEAD_EVENT, 'ORD-D'],
    [DEAD_EVENT_2, 'ORD-D2'],
  ] as const) {
    await post(base, '/v1/webhooks/hooks', { id, type: 'order.paid', orderId });
    await until(
      `${id} to be dead-lettered`,
      () => rows.all<{ status: string }>('SELECT status FROM oncely_events WHERE event_id = ?', [id]),
      (r) => r[0]?.status === 'dead',
    );
  }
  // The failed flow fails while the ledger is down, too (its label step reads the same file).
  await until(
    'the ship flow of ORD-3 to fail',
    () => rows.all<{ status: string }>("SELECT status FROM oncely_flows WHERE name = 'ship' AND biz_id LIKE '%ORD-3%'"),
    (r) => r[0]?.status === 'failed',
  );
  writeFileSync(ledgerUp, 'up');
  for (const id of ['evt-2', 'evt-3'])
    await post(base, '/v1/webhooks/hooks', { id, type: 'order.paid', orderId: `ORD-P${id}` });
  // The killed charges: after their lease the next caller is told the outcome is unknown.
  for (const [handler, orderId, key] of VICTIMS) {
    const unknown = await until(
      `a caller of ${key} to be told OUTCOME_UNKNOWN once the killed holder's lease ran out`,
      () => post(base, `/v1/invoke/${handler}`, { orderId, hang: true }, { 'idempotency-key': key }),
      (r) => r.status !== 409 || r.json.error?.code === 'OUTCOME_UNKNOWN',
    );
    if (unknown.json.error?.code !== 'OUTCOME_UNKNOWN') throw new Error(`${handler}: ${JSON.stringify(unknown.json)}`);
  }
  // The reconciler's pass: the capture's reconcile function settles it; the charges (none) wait for a person.
  const reconciled = await cli(['reconcile', APP, '--db', db, '--older-than', '0', '--json']);
  const report = JSON.parse(reconciled);
  if (report.settled.length !== 1 || report.awaiting[0]?.count !== VICTIMS.length - 1)
    throw new Error(`reconcile: ${reconciled}`);
  // A person's signal to the waiting review: its payload says who.
  const flows = await createFlows({ db: rows, flows: [] });
  const [review] = await rows.all<{ workflow_id: string }>(
    "SELECT workflow_id FROM oncely_flows WHERE name = 'review'",
  );
  await flows.signal(String(review?.workflow_id), 'approved', { by: 'ada' }, { signalId: 'sig-ORD-4' });
  // An agent tool whose sends need approval, on the same database; and a credit account.
  const once = await createOncely({ store: recordStoreFor(rows), tenant: 'default' });
  const sent: string[] = [];
  const notify = defineTool({
    name: 'notifyCustomer',
    description: 'Tells a customer their order shipped.',
    input: z.object({ orderId: z.string(), body: z.string() }),
    idempotency: { keyFields: ['orderId'], ttl: 'permanent' },
    outbound: { preview: (i) => ({ to: i.orderId, body: i.body }), approval: 'required' },
    execute: async (input) => {
      sent.push(input.orderId);
      return { messageId: `m-${input.orderId}` };
    },
  });
  // A tool with a cost: while its execute runs, the credits it reserved are held (an open reservation).
  const gates: (() => void)[] = [];
  let released = false;
  const summarize = defineTool({
    name: 'summarizeOrder',
    description: 'Summarizes an order for the customer.',
    input: z.object({ orderId: z.string() }),
    idempotency: { keyFields: ['orderId'], ttl: 'permanent' },
    cost: { credits: HELD_CREDITS, account: () => 'acme' },
    execute: async (input) => {
      if (!released) await new Promise<void>((resolve) => gates.push(resolve));
      return { summary: `order ${input.orderId}` };
    },
  });
  const release = () => {
    released = true;
    for (const open of gates.splice(0)) open();
  };
  const agent = await createAgentRuntime({ once, db: rows, tools: [notify, summarize] });
  await agent.credits.grant('acme', 25);
  const args = { orderId: 'ORD-1', body: 'Your tea has shipped.' };
  const first = await agent.call('notifyCustomer', args);
  if (first.deliveryState !== 'pending_approval') throw new Error(`notify: ${JSON.stringify(first)}`);
  // Everything settles before a page is compared with the database.
  await until(
    'no flow pending, running or waiting',
    () =>
      rows.all<{ n: number | string }>(
        "SELECT COUNT(*) AS n FROM oncely_flows WHERE status IN ('pending', 'running', 'waiting')",
      ),
    (r) => Number(r[0]?.n) === 0,
  );
  await until(
    'no event pending or processing',
    () =>
      rows.all<{ n: number | string }>(
        "SELECT COUNT(*) AS n FROM oncely_events WHERE status IN ('pending', 'processing')",
      ),
    (r) => Number(r[0]?.n) === 0,
  );
  return {
    agent,
    sent,
    args,
    hold: (orderId) => agent.call('summarizeOrder', { orderId }),
    release,
    close: async () => {
      release();
      await once.close();
    },
  };
}

/** Counts by state of a table, as the overview shows them. */
export async function countsOf(rows: Db, table: string, column: string): Promise<Record<string, number>> {
  const counted = await rows.all<{ s: string; n: number | string }>(
    `SELECT ${column} AS s, COUNT(*) AS n FROM ${table} GROUP BY ${column}`,
  );
  return Object.fromEntries(counted.map((r) => [r.s, Number(r.n)]));
}

/** Runs the built CLI; its stdout. */
export async function cli(args: string[]): Promise<string> {
  const { stdout } = await run(process.execPath, [CLI, ...args]);
  return stdout;
}

export { openDb };
