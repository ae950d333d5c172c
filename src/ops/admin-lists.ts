/**
 * The paged listings of the admin API over the host's tables (events, dead letters, flows,
 * approvals, credit accounts, open credit reservations): keyset pages whose cursor is the last row's sort key, so a page
 * costs its own rows however deep it is. Tables of components the database never migrated
 * (flows, agent) are listed as empty.
 */
import { recordActionId, TOOL_ACTION_PREFIX as TOOL_ACTION, toolAction } from '../agent/keys.js';
import { decodeCursor, encodeCursor, invalidCursor } from '../core/cursor.js';
import type { Sql } from '../db/types.js';

/** One page: its items and the cursor of the next page, null after the last. */
export interface Page<T> {
  items: T[];
  cursor: string | null;
}

/** Reads a cursor (of the last row's sort key) back, its parts of the types given; anything else is CURSOR_INVALID. */
export function decodeSortKey(cursor: string, types: readonly ('string' | 'number')[]): (string | number)[] {
  const key = decodeCursor(cursor);
  if (
    !Array.isArray(key) ||
    key.length !== types.length ||
    key.some((part, i) => typeof part !== types[i] || (typeof part === 'number' && !Number.isSafeInteger(part)))
  )
    throw invalidCursor();
  return key as (string | number)[];
}

/** Whether `table` exists (in the connection's schema on PostgreSQL). */
export async function hasTable(sql: Sql, table: string): Promise<boolean> {
  const rows =
    sql.dialect === 'postgres'
      ? await sql.all('SELECT 1 WHERE to_regclass(?) IS NOT NULL', [table])
      : await sql.all("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", [table]);
  return rows.length > 0;
}

const num = (v: unknown) => Number(v);
const numOrNull = (v: unknown) => (v === null || v === undefined ? null : Number(v));
const textOrNull = (v: unknown) => (v === null || v === undefined ? null : String(v));

/**
 * Rows of `select` after the cursor in the order of `order` (columns, each DESC when `desc`), the
 * cursor being the last row's values of those columns. Row values compare as tuples on both dialects.
 */
async function keyset(
  sql: Sql,
  query: {
    select: string;
    where: string[];
    values: unknown[];
    order: readonly { column: string; type: 'string' | 'number' }[];
    desc: boolean;
    limit: number;
    cursor: string | undefined;
  },
): Promise<{ rows: Record<string, unknown>[]; cursor: string | null }> {
  const { order, desc, limit } = query;
  const where = [...query.where];
  const values = [...query.values];
  const columns = order.map((o) => o.column);
  if (query.cursor !== undefined) {
    const after = decodeSortKey(
      query.cursor,
      order.map((o) => o.type),
    );
    where.push(`(${columns.join(', ')}) ${desc ? '<' : '>'} (${columns.map(() => '?').join(', ')})`);
    values.push(...after);
  }
  const direction = desc ? ' DESC' : '';
  const rows = await sql.all<Record<string, unknown>>(
    `${query.select}${where.length > 0 ? ` WHERE ${where.join(' AND ')}` : ''}
    ORDER BY ${columns.map((c) => `${c}${direction}`).join(', ')} LIMIT ?`,
    [...values, limit],
  );
  const last = rows.at(-1);
  const cursor =
    rows.length === limit && last
      ? encodeCursor(order.map((o) => (o.type === 'number' ? Number(last[o.column]) : String(last[o.column]))))
      : null;
  return { rows, cursor };
}

/** Statuses of a stored event (as event-sql.ts writes them). */
export const EVENT_STATUSES = ['pending', 'processing', 'waiting', 'applied', 'stale', 'dead', 'no_consumer'] as const;

/** An event as the admin listing shows it: its state, not its payload (GET by the CLI or the table for that). */
export interface EventSummary {
  source: string;
  eventId: string;
  type: string;
  status: string;
  attempts: number;
  nextAttemptAt: number;
  lastError: string | null;
  receivedAt: number;
  updatedAt: number;
}

const EVENT_ORDER = [
  { column: 'received_at', type: 'number' },
  { column: 'source', type: 'string' },
  { column: 'event_id', type: 'string' },
] as const;

/** Events newest first, of one status and source when given. */
export async function listEvents(
  sql: Sql,
  options: { status?: string; source?: string; limit: number; cursor?: string },
): Promise<Page<EventSummary>> {
  const where: string[] = [];
  const values: unknown[] = [];
  for (const [column, value] of [
    ['status', options.status],
    ['source', options.source],
  ] as const)
    if (value !== undefined) {
      where.push(`${column} = ?`);
      values.push(value);
    }
  const { rows, cursor } = await keyset(sql, {
    select: `SELECT source, event_id, type, status, attempts, next_attempt_at, last_error, received_at, updated_at
    FROM oncely_events`,
    where,
    values,
    order: EVENT_ORDER,
    desc: true,
    limit: options.limit,
    cursor: options.cursor,
  });
  const items = rows.map((r) => ({
    source: String(r.source),
    eventId: String(r.event_id),
    type: String(r.type),
    status: String(r.status),
    attempts: num(r.attempts),
    nextAttemptAt: num(r.next_attempt_at),
    lastError: textOrNull(r.last_error),
    receivedAt: num(r.received_at),
    updatedAt: num(r.updated_at),
  }));
  return { items, cursor };
}

/** Dead letters in the order they arrived (as `oncely events dead list` prints them), a page at a time. */
export async function listDeadLetters(
  sql: Sql,
  options: { source?: string; limit: number; cursor?: string },
): Promise<Page<EventSummary & { id: string }>> {
  const where = ["status = 'dead'"];
  const values: unknown[] = [];
  if (options.source !== undefined) {
    where.push('source = ?');
    values.push(options.source);
  }
  const { rows, cursor } = await keyset(sql, {
    select: `SELECT source, event_id, type, status, attempts, next_attempt_at, last_error, received_at, updated_at
    FROM oncely_events`,
    where,
    values,
    order: EVENT_ORDER,
    desc: false,
    limit: options.limit,
    cursor: options.cursor,
  });
  const items = rows.map((r) => ({
    id: `${r.source}/${r.event_id}`,
    source: String(r.source),
    eventId: String(r.event_id),
    type: String(r.type),
    status: String(r.status),
    attempts: num(r.attempts),
    nextAttemptAt: num(r.next_attempt_at),
    lastError: textOrNull(r.last_error),
    receivedAt: num(r.received_at),
    updatedAt: num(r.updated_at),
  }));
  return { items, cursor };
}

/** Statuses a flow run may have. */
export const FLOW_STATUSES = ['pending', 'running', 'waiting', 'completed', 'failed', 'cancelled'] as const;

/** A flow as the admin listing shows it (its input and result with `GET flows/:id`). */
export interface FlowSummary {
  workflowId: string;
  name: string;
  bizId: string;
  status: string;
  runs: number;
  error: unknown;
  createdAt: number;
  updatedAt: number;
}

/** Flows newest first, of one status when given; none when the database has no flow tables. */
export async function listFlowRuns(
  sql: Sql,
  options: { status?: string; limit: number; cursor?: string },
): Promise<Page<FlowSummary>> {
  if (!(await hasTable(sql, 'oncely_flows'))) return emptyPage(options.cursor);
  const { rows, cursor } = await keyset(sql, {
    select: 'SELECT workflow_id, name, biz_id, status, runs, error, created_at, updated_at FROM oncely_flows',
    where: options.status === undefined ? [] : ['status = ?'],
    values: options.status === undefined ? [] : [options.status],
    order: [
      { column: 'created_at', type: 'number' },
      { column: 'workflow_id', type: 'string' },
    ],
    desc: true,
    limit: options.limit,
    cursor: options.cursor,
  });
  const items = rows.map((r) => ({
    workflowId: String(r.workflow_id),
    name: String(r.name),
    bizId: String(r.biz_id),
    status: String(r.status),
    runs: num(r.runs),
    error: r.error === null ? null : JSON.parse(String(r.error)),
    createdAt: num(r.created_at),
    updatedAt: num(r.updated_at),
  }));
  return { items, cursor };
}

/** Statuses of an approval (agent/approvals.ts). */
export const APPROVAL_STATUSES = ['pending', 'approved', 'rejected', 'expired'] as const;

/** An approval as listed: what was asked, of which tool, and who decided it when. */
export interface ApprovalSummary {
  id: string;
  tenant: string;
  tool: string;
  idempotencyKey: string;
  /** The SHA-256 the approval is bound to: the content the tool sends once approved. */
  contentHash: string;
  preview: unknown;
  status: string;
  requestedAt: number;
  expiresAt: number;
  decidedBy: string | null;
  decidedAt: number | null;
  reason: string | null;
}

/** Approvals newest first, of one status when given; none when the agent tables were never migrated. */
export async function listApprovalRows(
  sql: Sql,
  options: { status?: string; limit: number; cursor?: string },
): Promise<Page<ApprovalSummary>> {
  if (!(await hasTable(sql, 'oncely_approvals'))) return emptyPage(options.cursor);
  const { rows, cursor } = await keyset(sql, {
    select: `SELECT id, tenant, tool, idempotency_key, content_hash, preview, status, requested_at, expires_at, decided_by,
    decided_at, reason FROM oncely_approvals`,
    where: options.status === undefined ? [] : ['status = ?'],
    values: options.status === undefined ? [] : [options.status],
    order: [
      { column: 'requested_at', type: 'number' },
      { column: 'id', type: 'string' },
    ],
    desc: true,
    limit: options.limit,
    cursor: options.cursor,
  });
  const items = rows.map((r) => ({
    id: String(r.id),
    tenant: String(r.tenant),
    tool: String(r.tool),
    idempotencyKey: String(r.idempotency_key),
    contentHash: String(r.content_hash),
    preview: JSON.parse(String(r.preview)),
    status: String(r.status),
    requestedAt: num(r.requested_at),
    expiresAt: num(r.expires_at),
    decidedBy: textOrNull(r.decided_by),
    decidedAt: numOrNull(r.decided_at),
    reason: textOrNull(r.reason),
  }));
  return { items, cursor };
}

/** A credit account: what it can still spend, and what reservations hold of it now. */
export interface CreditBalance {
  account: string;
  /** Credits available (reservations are taken out of it when made). */
  balance: number;
  /** Credits held by reservations not yet confirmed or released. */
  reserved: number;
}

/** Credit accounts by name; none when the agent tables were never migrated. */
export async function listCredits(sql: Sql, options: { limit: number; cursor?: string }): Promise<Page<CreditBalance>> {
  if (!(await hasTable(sql, 'oncely_credit_accounts'))) return emptyPage(options.cursor);
  const { rows, cursor } = await keyset(sql, {
    select: `SELECT account, balance, (SELECT COALESCE(SUM(r.credits), 0) FROM oncely_credit_reservations r
    WHERE r.account = oncely_credit_accounts.account AND r.status = 'reserved') AS reserved FROM oncely_credit_accounts`,
    where: [],
    values: [],
    order: [{ column: 'account', type: 'string' }],
    desc: false,
    limit: options.limit,
    cursor: options.cursor,
  });
  const items = rows.map((r) => ({ account: String(r.account), balance: num(r.balance), reserved: num(r.reserved) }));
  return { items, cursor };
}

/** A credit reservation not yet confirmed nor released: what it holds of which account, and for which call. */
export interface OpenReservation {
  /** The action the credits are held for (the tool call's actionId, the same on every retry of one intent). */
  actionId: string;
  account: string;
  /** Credits held (taken out of the account's balance until confirmed or released). */
  credits: number;
  /** When the action first reserved them. */
  reservedAt: number;
  /** When the sweep gives them back if its holder never confirms nor releases them. */
  expiresAt: number;
  /** The trace id of the record that holds it; null for a reservation made outside a record. */
  traceId: string | null;
  /**
   * The call that holds it, as its approval (same id) or its running record (same trace id) says;
   * null fields when neither does (the record finished, expired, or several share the trace id).
   */
  tenant: string | null;
  tool: string | null;
  key: string | null;
  /** The holding record's state (in_progress, or unknown after its holder vanished); null when not found. */
  recordState: string | null;
}

/**
 * Open reservations newest first, of one account when given; none when the agent tables were
 * never migrated. A reservation stores its account, credits and holder's trace id, not its tool
 * nor key: those come from the approval of the same id (tools that need one) or from the
 * unfinished record of the same trace id (a page's trace ids in one query on the records' state
 * index: an open reservation's record is in_progress or unknown).
 */
export async function listReservations(
  sql: Sql,
  options: { account?: string; limit: number; cursor?: string },
): Promise<Page<OpenReservation>> {
  if (!(await hasTable(sql, 'oncely_credit_reservations'))) return emptyPage(options.cursor);
  const where = ["status = 'reserved'"];
  const values: unknown[] = [];
  if (options.account !== undefined) {
    where.push('account = ?');
    values.push(options.account);
  }
  const { rows, cursor } = await keyset(sql, {
    select: 'SELECT action_id, account, credits, created_at, expires_at, life FROM oncely_credit_reservations',
    where,
    values,
    order: [
      { column: 'created_at', type: 'number' },
      { column: 'action_id', type: 'string' },
    ],
    desc: true,
    limit: options.limit,
    cursor: options.cursor,
  });
  const ids = rows.map((r) => String(r.action_id));
  const traces = [...new Set(rows.map((r) => String(r.life)).filter((t) => t !== ''))];
  const approvals = new Map<string, { tenant: string; tool: string; key: string }>();
  if (ids.length > 0 && (await hasTable(sql, 'oncely_approvals')))
    for (const a of await sql.all<Record<string, unknown>>(
      `SELECT id, tenant, tool, idempotency_key FROM oncely_approvals WHERE id IN (${ids.map(() => '?').join(', ')})`,
      ids,
    ))
      approvals.set(String(a.id), { tenant: String(a.tenant), tool: String(a.tool), key: String(a.idempotency_key) });
  const holders = new Map<string, { tenant: string; action: string; key: string; state: string }[]>();
  if (traces.length > 0 && (await hasTable(sql, 'oncely_records')))
    for (const r of await sql.all<Record<string, unknown>>(
      `SELECT tenant, action, key, state, trace_id FROM oncely_records
      WHERE (state = 'in_progress' OR state = 'unknown') AND trace_id IN (${traces.map(() => '?').join(', ')})`,
      traces,
    )) {
      const action = String(r.action);
      if (!action.startsWith(TOOL_ACTION)) continue;
      const found = { tenant: String(r.tenant), action, key: String(r.key), state: String(r.state) };
      holders.set(String(r.trace_id), [...(holders.get(String(r.trace_id)) ?? []), found]);
    }
  const items = rows.map((r): OpenReservation => {
    const actionId = String(r.action_id);
    const traceId = String(r.life) === '' ? null : String(r.life);
    const candidates = traceId === null ? [] : (holders.get(traceId) ?? []);
    // One trace may run several tools: the record whose id makes this actionId (agent/keys.ts, a
    // tool without actionFields), else the only one of the trace.
    const record =
      candidates.find((c) => recordActionId(c.tenant, c.action, c.key) === actionId) ??
      (candidates.length === 1 ? candidates[0] : undefined);
    const approval = approvals.get(actionId);
    // An approval names its call for sure; its record's state is shown when it is that call's.
    const same = !approval || (record?.key === approval.key && record.action === toolAction(approval.tool));
    const call =
      approval ?? (record && { tenant: record.tenant, tool: record.action.slice(TOOL_ACTION.length), key: record.key });
    return {
      actionId,
      account: String(r.account),
      credits: num(r.credits),
      reservedAt: num(r.created_at),
      expiresAt: num(r.expires_at),
      traceId,
      tenant: call?.tenant ?? null,
      tool: call?.tool ?? null,
      key: call?.key ?? null,
      recordState: record && same ? record.state : null,
    };
  });
  return { items, cursor };
}

// A cursor is still checked when there is nothing to page: a bad one is the caller's bug either way.
function emptyPage<T>(cursor: string | undefined): Page<T> {
  if (cursor !== undefined) decodeSortKey(cursor, []);
  return { items: [], cursor: null };
}
