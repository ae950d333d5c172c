/**
 * The admin API on a listening host (SQLite and PostgreSQL), called over real HTTP: every route
 * once on real data (an unknown record left by a holder killed with SIGKILL under 'hold', a
 * dead-lettered event, a failed and a waiting flow, approvals, credits and the reservations of
 * running tool calls, a planted duplicate),
 * and every change in the audit table and counted. Bad input: admin-input.test.ts.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { requestApproval } from '../../src/agent/approvals.js';
import { Credits } from '../../src/agent/credits.js';
import { createAgentRuntime, defineTool } from '../../src/agent/index.js';
import { migrateAgentTables } from '../../src/agent/tables.js';
import { recordRef } from '../../src/core/record.js';
import { openDb } from '../../src/db/index.js';
import type { Db } from '../../src/db/types.js';
import { createOncely } from '../../src/engine/engine.js';
import { defineFlow } from '../../src/flows/define.js';
import { recordStoreFor } from '../../src/host/records.js';
import { hostTargets, type RunningHost, sleep, startHost } from '../support/host-app.js';
import { until } from '../support/wait.js';

const TOKEN = randomBytes(24).toString('hex');
// biome-ignore lint/suspicious/noExplicitAny: answers are JSON read field by field, as the README documents them.
type Json = any;
const src = (path: string) => fileURLToPath(new URL(`../../src/${path}`, import.meta.url));

/** A process that claims `key` of action `charge` under 'hold' with a 300 ms lease, says so, and hangs. */
function holder(target: string, key: string) {
  const code = `
    const { openDb } = await import(${JSON.stringify(src('db/index.ts'))});
    const { recordStoreFor } = await import(${JSON.stringify(src('host/records.ts'))});
    const { createOncely } = await import(${JSON.stringify(src('engine/engine.ts'))});
    const db = await openDb(${JSON.stringify(target)});
    const once = await createOncely({ store: recordStoreFor(db), tenant: 'default', defaults: { lease: 300 } });
    await once.run({ action: 'charge', key: ${JSON.stringify(key)}, onLeaseExpired: 'hold' }, async () => {
      console.log('claimed');
      await new Promise(() => {});
    });`;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code]);
  let err = '';
  child.stderr.on('data', (d) => {
    err += d;
  });
  const claimed = new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (d) => String(d).includes('claimed') && resolve());
    child.on('exit', (c) => reject(new Error(`holder exited ${c}: ${err}`)));
  });
  const exited = new Promise((resolve) => child.on('exit', resolve));
  return { child, claimed, exited };
}

describe.each(hostTargets())('admin API on $name', ({ target: makeTarget, cleanup }) => {
  const target = makeTarget();
  let running: RunningHost;
  let db: Db;
  const state = { consumerDown: true, payDown: true };
  const pay = defineFlow<{ id: string }, string>('pay', { seed: ['id'] }, async (run) =>
    run.step(
      'charge',
      () => {
        if (state.payDown) throw new Error('psp down');
        return 'paid';
      },
      { retry: { attempts: 1, final: () => true } },
    ),
  );
  const approve = defineFlow<{ id: string }, unknown>('await-approval', { seed: ['id'] }, async (run) =>
    run.waitFor('approved'),
  );

  /** One admin request with the token (unless `token` says otherwise), answered as status, headers and JSON. */
  const call = async (
    method: string,
    path: string,
    options: { body?: unknown; raw?: string; token?: string | null; operator?: string; type?: string } = {},
  ) => {
    const headers: Record<string, string> = {};
    if (options.token !== null) headers.authorization = `Bearer ${options.token ?? TOKEN}`;
    if (options.operator !== undefined) headers['x-oncely-operator'] = options.operator;
    // Every change sends a JSON body, {} where it has no fields.
    const given = options.body ?? (method === 'POST' && options.raw === undefined ? {} : undefined);
    const body = options.raw ?? (given === undefined ? undefined : JSON.stringify(given));
    if (body !== undefined) headers['content-type'] = options.type ?? 'application/json';
    const res = await fetch(`${running.base}/v1/admin/${path}`, { method, headers, body });
    return { status: res.status, headers: res.headers, json: (await res.json()) as Json };
  };
  const ok = async (method: string, path: string, options: Parameters<typeof call>[2] = {}) => {
    const res = await call(method, path, { operator: 'alice', ...options });
    expect(res.status, JSON.stringify(res.json)).toBe(200);
    expect(res.json.code).toBe(0);
    return res.json.data;
  };
  const counted = (action: string, outcome: string) =>
    running.host.metrics.value('oncely_admin_actions_total', [action, outcome]);

  beforeAll(async () => {
    running = await startHost(
      target,
      {
        schemaSql: 'CREATE TABLE ledger (id INTEGER PRIMARY KEY, order_id TEXT NOT NULL, kind TEXT NOT NULL);',
        config: {
          events: { maxAttempts: 1, backoff: 10 },
          effects: [{ table: 'ledger', by: ['orderId', 'kind'] }],
          duplicateScan: false,
        },
        consumers: {
          'shop/order.paid': {
            handle: () => {
              if (state.consumerDown) throw new Error('consumer down');
            },
          },
        },
        flows: [pay, approve],
      },
      { host: { adminToken: TOKEN } },
    );
    db = await openDb(target);
  });
  afterAll(async () => {
    await db?.close();
    await running?.stop();
    await cleanup();
  });

  it('answers stats, and records: an unknown one listed, shown and resolved by the operator named', async () => {
    const stats = await ok('GET', 'stats');
    expect(Object.keys(stats.rates)).toContain('duplicateInterception');

    const key = `ORD-${randomBytes(4).toString('hex')}/charge`;
    const held = holder(target, key);
    await held.claimed;
    held.child.kill('SIGKILL');
    await held.exited;
    // The next caller finds the lease run out: under 'hold' the record turns unknown, nothing runs again.
    // Until the holder's 300 ms lease runs out, a caller is told IN_PROGRESS.
    const takerDb = await openDb(target);
    const taker = await createOncely({ store: recordStoreFor(takerDb), tenant: 'default', defaults: { lease: 300 } });
    let ran = 0;
    const charge = () =>
      taker.run({ action: 'charge', key, onLeaseExpired: 'hold' }, async () => {
        ran++;
        return { charged: 'again' };
      });
    const refused = await until(
      "a caller after the killed holder's lease to be told OUTCOME_UNKNOWN",
      () =>
        charge().then(
          (value) => ({ ran: value }),
          (error: { code?: string }) => ({ code: error.code }),
        ),
      (answer) => !('code' in answer) || answer.code !== 'IN_PROGRESS',
    );
    expect(refused).toEqual({ code: 'OUTCOME_UNKNOWN' });

    const ref = recordRef({ tenant: 'default', action: 'charge', key });
    expect(ref).toContain('%2F');
    const listed = await ok('GET', 'records?state=unknown&action=charge&limit=10');
    expect(listed.records.map((r: { ref: string }) => r.ref)).toContain(ref);
    const shown = await ok('GET', `records/${encodeURIComponent(ref)}`);
    expect(shown).toMatchObject({ ref, state: 'unknown', key, action: 'charge', tenant: 'default' });

    const resolved = await ok('POST', `records/${encodeURIComponent(ref)}/resolve`, {
      body: { value: { charged: true, psp: 'ch_1' }, note: 'PSP says charged' },
    });
    expect(resolved).toMatchObject({ state: 'succeeded', settlement: { by: 'admin:token:alice', answer: 'value' } });
    expect(resolved.settlement.note).toBe('PSP says charged');
    // The settled value is what the next caller gets; the charge never ran twice.
    const replay = await charge();
    expect(replay).toMatchObject({ value: { charged: true, psp: 'ch_1' }, replayed: true });
    expect(ran).toBe(0);
    await taker.close();
    await takerDb.close();

    const again = await call('POST', `records/${encodeURIComponent(ref)}/resolve`, { body: { retry: true } });
    expect(again.status).toBe(409);
    expect(again.json.error.code).toBe('NOT_RESOLVABLE');
    expect(counted('records.resolve', 'done')).toBe(1);
    expect(counted('records.resolve', 'refused')).toBe(1);
  });

  it('lists events and dead letters and replays one, then refuses a replay of what is not dead', async () => {
    await running.host.events.intake('shop', 'evt-1', 'order.paid', { orderId: 'O-1' });
    const dead = await until(
      'evt-1 listed as a dead letter',
      () => ok('GET', 'events/dead?source=shop'),
      (d) => d.deadLetters.length === 1,
    );
    expect(dead.deadLetters[0]).toMatchObject({ id: 'shop/evt-1', type: 'order.paid', status: 'dead', attempts: 1 });
    expect(dead.deadLetters[0].lastError).toContain('consumer down');
    const listed = await ok('GET', 'events?status=dead&source=shop');
    expect(listed.events).toEqual([expect.objectContaining({ source: 'shop', eventId: 'evt-1' })]);

    state.consumerDown = false;
    expect(await ok('POST', 'events/dead/replay', { body: { source: 'shop', id: 'evt-1' } })).toEqual({ replayed: 1 });
    await until(
      'the replayed evt-1 to apply',
      () => running.host.events.get('shop', 'evt-1'),
      (e) => e?.status === 'applied',
    );
    const notDead = await call('POST', 'events/dead/replay', { body: { source: 'shop', id: 'evt-1' } });
    expect([notDead.status, notDead.json.error.code]).toEqual([409, 'NOT_REPLAYABLE']);
    const missing = await call('POST', 'events/dead/replay', { body: { source: 'shop', id: 'evt-404' } });
    expect([missing.status, missing.json.error.code]).toEqual([404, 'NOT_FOUND']);
    expect(await ok('POST', 'events/dead/replay', { body: { all: true } })).toEqual({ replayed: 0 });
    expect(counted('events.replay', 'done')).toBe(2);
  });

  it('lists and shows flows, retries a failed one, cancels a waiting one', async () => {
    const flows = running.host.flows;
    if (!flows) throw new Error('the host has flows');
    const { workflowId } = await flows.start(pay, { id: 'F1' });
    await until(
      'the pay flow to fail',
      () => flows.get(workflowId),
      (f) => f?.status === 'failed',
    );
    const failed = await ok('GET', 'flows?status=failed');
    expect(failed.flows).toEqual([expect.objectContaining({ workflowId, name: 'pay', status: 'failed' })]);
    const shown = await ok('GET', `flows/${workflowId}`);
    expect(shown.steps).toEqual([expect.objectContaining({ stepId: 'charge', status: 'failed' })]);
    const notCancellable = await call('POST', `flows/${workflowId}/cancel`);
    expect([notCancellable.status, notCancellable.json.error.code]).toEqual([409, 'FLOW_NOT_CANCELLABLE']);

    state.payDown = false;
    expect(await ok('POST', `flows/${workflowId}/retry`)).toMatchObject({ workflowId });
    expect(await flows.result(workflowId, { timeout: '10s' })).toBe('paid');
    const notRetryable = await call('POST', `flows/${workflowId}/retry`);
    expect([notRetryable.status, notRetryable.json.error.code]).toEqual([409, 'FLOW_NOT_RETRYABLE']);

    const waiting = await flows.start(approve, { id: 'W1' });
    await until(
      'the approval flow to wait',
      () => flows.get(waiting.workflowId),
      (f) => f?.status === 'waiting',
    );
    expect(await ok('POST', `flows/${waiting.workflowId}/cancel`)).toMatchObject({ status: 'cancelled' });
    // A signal after the cancel wakes nothing: the flow stays cancelled, and awaiting it says so.
    await flows.signal(waiting.workflowId, 'approved', { by: 'bob' }, { signalId: 's-1' });
    // sleep: a window for the signal to wake the flow, which must not happen
    await sleep(300);
    expect((await flows.get(waiting.workflowId))?.status).toBe('cancelled');
    await expect(flows.result(waiting.workflowId)).rejects.toMatchObject({ code: 'FLOW_CANCELLED' });
    const cancelledAgain = await call('POST', `flows/${waiting.workflowId}/cancel`);
    expect(cancelledAgain.json.error.code).toBe('FLOW_NOT_CANCELLABLE');
    const missing = await call('GET', 'flows/pay-nope');
    expect([missing.status, missing.json.error.code]).toEqual([404, 'NOT_FOUND']);
  });

  it('approvals and credits: empty before the agent tables exist, then listed, decided once', async () => {
    expect(await ok('GET', 'approvals')).toEqual({ approvals: [], cursor: null });
    expect(await ok('GET', 'credits')).toEqual({ accounts: [], cursor: null });
    const unknown = await call('POST', 'approvals/ap-0/approve');
    expect([unknown.status, unknown.json.error.code]).toEqual([404, 'APPROVAL_UNKNOWN']);

    await migrateAgentTables(db);
    const now = Date.now();
    for (const id of ['ap-1', 'ap-2', 'ap-3'])
      await requestApproval(db, {
        id,
        tenant: 'default',
        tool: 'send_email',
        idempotencyKey: `mail-${id}`,
        contentHash: 'h',
        input: { to: 'x@example.com' },
        preview: { subject: id },
        requestedAt: now,
        expiresAt: now + 60_000,
      });
    const credits = new Credits(db);
    await credits.grant('acct-1', 100);
    await credits.reserve('acct-1', 30, 'act-1', now + 60_000);

    // Eight operators approve at once: the database lets one decide, the others are told it was decided.
    const racing = await Promise.all(
      Array.from({ length: 8 }, (_, i) => call('POST', 'approvals/ap-3/approve', { operator: `op-${i}` })),
    );
    expect(racing.map((r) => r.status).sort()).toEqual([200, 409, 409, 409, 409, 409, 409, 409]);
    const winner = racing.find((r) => r.status === 200)?.json.data.decidedBy;
    expect(racing.filter((r) => r.status === 409).every((r) => r.json.error.code === 'APPROVAL_DECIDED')).toBe(true);
    const decided = await db.all<{ operator: string; outcome: string }>(
      "SELECT operator, outcome FROM oncely_admin_actions WHERE target = 'ap-3' ORDER BY id",
    );
    expect(decided.filter((r) => r.outcome === 'done').map((r) => `admin:token:${r.operator}`)).toEqual([winner]);
    expect(decided.filter((r) => r.outcome === 'refused')).toHaveLength(7);

    const pending = await ok('GET', 'approvals?status=pending&limit=1');
    expect(pending.approvals).toHaveLength(1);
    expect(pending.cursor).not.toBeNull();
    const next = await ok('GET', `approvals?status=pending&limit=1&cursor=${pending.cursor}`);
    expect(next.approvals).toHaveLength(1);
    expect(new Set([pending.approvals[0].id, next.approvals[0].id])).toEqual(new Set(['ap-1', 'ap-2']));

    expect(await ok('POST', 'approvals/ap-1/approve')).toMatchObject({
      status: 'approved',
      decidedBy: 'admin:token:alice',
    });
    const twice = await call('POST', 'approvals/ap-1/reject', { body: { reason: 'changed my mind' } });
    expect([twice.status, twice.json.error.code]).toEqual([409, 'APPROVAL_DECIDED']);
    expect(await ok('POST', 'approvals/ap-2/reject', { body: { reason: 'wrong recipient' } })).toMatchObject({
      status: 'rejected',
      reason: 'wrong recipient',
      decidedBy: 'admin:token:alice',
    });
    expect(await ok('GET', 'credits')).toEqual({
      accounts: [{ account: 'acct-1', balance: 70, reserved: 30 }],
      cursor: null,
    });
  });

  it('open reservations: each with its account, credits and call, newest first, by account, paged; gone once settled', async () => {
    // Two tool calls that hold credits while they run (one approved first), and one reserved outside any record.
    const gates: (() => void)[] = [];
    const started: string[] = [];
    const hang = async (input: { orderId: string }) => {
      started.push(input.orderId);
      await new Promise<void>((resolve) => gates.push(resolve));
      return { ok: input.orderId };
    };
    const charge = defineTool({
      name: 'chargeCard',
      description: 'Charges a card.',
      input: z.object({ orderId: z.string() }),
      idempotency: { keyFields: ['orderId'], ttl: 'permanent' },
      cost: { credits: 7, account: ({ tenant }) => `acct-${tenant}` },
      execute: hang,
    });
    const mail = defineTool({
      name: 'mailInvoice',
      description: 'Mails an invoice.',
      input: z.object({ orderId: z.string() }),
      idempotency: { keyFields: ['orderId'], ttl: 'permanent' },
      outbound: { preview: (i) => ({ invoice: i.orderId }), approval: 'required' },
      cost: { credits: 5, account: () => 'acct-mail' },
      execute: hang,
    });
    const once = await createOncely({ store: recordStoreFor(db), tenant: 'default' });
    const agent = await createAgentRuntime({ once, db, tools: [charge, mail] });
    await agent.credits.grant('acct-t2', 50);
    await agent.credits.grant('acct-mail', 20);
    const asked = await agent.call('mailInvoice', { orderId: 'INV-1' });
    expect(asked.deliveryState).toBe('pending_approval');
    // A pending approval holds nothing yet: credits are reserved when the tool runs.
    expect((await ok('GET', 'credits/reservations')).reservations.map((r: Json) => r.actionId)).toEqual(['act-1']);
    const calls = [agent.call('chargeCard', { orderId: 'O-77' }, { tenant: 't2', traceId: 'trace-o77' })];
    await until(
      'the charge call to start',
      async () => started.length,
      (n) => n === 1,
    );
    calls.push(agent.approve(String(asked.approvalId), { approver: 'alice' }));
    await until(
      'the approved mail call to start',
      async () => started.length,
      (n) => n === 2,
    );
    const listed = await ok('GET', 'credits/reservations');
    expect(listed.cursor).toBeNull();
    const byAccount = (account: string) => listed.reservations.find((r: Json) => r.account === account);
    const [mailed, charged, bare] = ['acct-mail', 'acct-t2', 'acct-1'].map(byAccount);
    expect(listed.reservations).toHaveLength(3);
    expect(mailed).toMatchObject({
      actionId: asked.actionId,
      account: 'acct-mail',
      credits: 5,
      tenant: 'default',
      tool: 'mailInvoice',
      key: asked.idempotencyKey,
      recordState: 'in_progress',
    });
    expect(charged).toMatchObject({
      account: 'acct-t2',
      credits: 7,
      traceId: 'trace-o77',
      tenant: 't2',
      tool: 'chargeCard',
      recordState: 'in_progress',
    });
    expect(charged.key).toContain('O-77');
    expect(bare).toEqual({
      actionId: 'act-1',
      account: 'acct-1',
      credits: 30,
      reservedAt: expect.any(Number),
      expiresAt: expect.any(Number),
      traceId: null,
      tenant: null,
      tool: null,
      key: null,
      recordState: null,
    });
    // What the database holds, newest first.
    const held = await db.all<{ action_id: string; created_at: number | string; expires_at: number | string }>(
      "SELECT action_id, created_at, expires_at FROM oncely_credit_reservations WHERE status = 'reserved' ORDER BY created_at DESC, action_id DESC",
    );
    expect(listed.reservations.map((r: Json) => [r.actionId, r.reservedAt, r.expiresAt])).toEqual(
      held.map((h) => [h.action_id, Number(h.created_at), Number(h.expires_at)]),
    );
    // By account, and paged one at a time with the listings' cursor.
    expect((await ok('GET', 'credits/reservations?account=acct-t2')).reservations).toEqual([charged]);
    expect(await ok('GET', 'credits/reservations?account=acct-none')).toEqual({ reservations: [], cursor: null });
    const walked: Json[] = [];
    let cursor: string | null = null;
    do {
      const pageOf: Json = await ok('GET', `credits/reservations?limit=1${cursor ? `&cursor=${cursor}` : ''}`);
      walked.push(...pageOf.reservations);
      cursor = pageOf.cursor;
    } while (cursor);
    expect(walked).toEqual(listed.reservations);
    for (const [query, code] of [
      ['account=', 'INVALID_ARGUMENT'],
      ['tenant=t2', 'INVALID_ARGUMENT'],
      ['cursor=bm90LW91cnM', 'CURSOR_INVALID'],
      ['limit=0', 'INVALID_ARGUMENT'],
    ] as const) {
      const bad = await call('GET', `credits/reservations?${query}`);
      expect([bad.status, bad.json.error.code], query).toEqual([400, code]);
    }
    const denied = await call('GET', 'credits/reservations', { token: 'wrong-token-0123456789abcdef' });
    expect(denied.status).toBe(401);
    // The calls end: their reservations are confirmed, and no longer listed.
    for (const open of gates) open();
    expect((await Promise.all(calls)).map((c) => c.deliveryState)).toEqual(['sent', 'sent']);
    expect((await ok('GET', 'credits/reservations')).reservations.map((r: Json) => r.actionId)).toEqual(['act-1']);
    expect((await ok('GET', 'credits')).accounts).toEqual([
      { account: 'acct-1', balance: 70, reserved: 30 },
      { account: 'acct-mail', balance: 15, reserved: 0 },
      { account: 'acct-t2', balance: 43, reserved: 0 },
    ]);
    expect(counted('credits.reservations', 'done')).toBeGreaterThanOrEqual(8);
    expect(counted('credits.reservations', 'refused')).toBe(4);
    await once.close();
  });

  it('lists the duplicate findings a scan stored', async () => {
    expect((await ok('GET', 'duplicates')).findings).toEqual([]);
    await db.run("INSERT INTO ledger (id, order_id, kind) VALUES (1, 'O-9', 'charge'), (2, 'O-9', 'charge')");
    await running.host.scanDuplicates();
    const found = await ok('GET', 'duplicates?table=ledger&limit=10');
    expect(found.findings).toEqual([expect.objectContaining({ table: 'ledger', count: 2 })]);
  });

  it('has every change in the audit table with who, what, when and how it ended, newest first, paged', async () => {
    const rows = await db.all<Record<string, unknown>>(
      `SELECT who, operator, action, target, outcome, at FROM oncely_admin_actions
      WHERE outcome = 'done' ORDER BY id`,
    );
    expect(rows.map((r) => r.action)).toEqual([
      'records.resolve',
      'events.replay',
      'events.replay',
      'flows.retry',
      'flows.cancel',
      'approvals.approve',
      'approvals.approve',
      'approvals.reject',
    ]);
    for (const row of rows) {
      expect(row).toMatchObject({
        who: 'token',
        operator: row.target === 'ap-3' ? expect.stringMatching(/^op-/) : 'alice',
      });
      expect(Math.abs(Number(row.at) - Date.now())).toBeLessThan(120_000);
    }
    expect(rows.map((r) => r.target)).toEqual(
      expect.arrayContaining(['shop/evt-1', 'all', 'pay-F1', 'await-approval-W1', 'ap-1', 'ap-2']),
    );
    expect(await db.all("SELECT 1 FROM oncely_admin_actions WHERE outcome = 'started'")).toEqual([]);
    const first = await ok('GET', 'audit?limit=2');
    expect(first.actions).toHaveLength(2);
    expect(first.actions[0].id).toBeGreaterThan(first.actions[1].id);
    const second = await ok('GET', `audit?limit=2&cursor=${first.cursor}`);
    expect(second.actions[0].id).toBeLessThan(first.actions[1].id);
    const resolved = (await db.all<{ detail: string }>(
      "SELECT detail FROM oncely_admin_actions WHERE action = 'records.resolve' AND outcome = 'done'",
    )) as { detail: string }[];
    expect(JSON.parse(resolved[0]?.detail ?? '{}')).toMatchObject({
      asked: { resolution: { value: { charged: true } }, note: 'PSP says charged' },
      answered: { state: 'succeeded' },
    });
    expect(counted('flows.cancel', 'done')).toBe(1);
    expect(counted('approvals.approve', 'done')).toBe(2);
    expect(counted('approvals.reject', 'refused')).toBe(1);
    expect(counted('audit.list', 'done')).toBe(2);
    // The counts reach the database's totals too, summed over processes.
    const stats = await ok('GET', 'stats');
    expect(stats.totals.oncely_admin_actions_total).toEqual(
      expect.arrayContaining([{ labels: { action: 'records.resolve', outcome: 'done' }, value: 1 }]),
    );
  });
});
