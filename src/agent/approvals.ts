import type { Db } from '../db/types.js';

/** Where an approval stands. `expired` is recorded when someone acts on it too late. */
export type ApprovalStatus = 'pending' | 'approved' | 'rejected' | 'expired';

/** An approval, bound to one intent (its id is the action id) and to the hash of the content previewed. */
export interface Approval {
  id: string;
  tenant: string;
  tool: string;
  idempotencyKey: string;
  contentHash: string;
  input: unknown;
  preview: unknown;
  status: ApprovalStatus;
  requestedAt: number;
  expiresAt: number;
  decidedBy: string | null;
  decidedAt: number | null;
  reason: string | null;
}

interface Row {
  id: string;
  tenant: string;
  tool: string;
  idempotency_key: string;
  content_hash: string;
  input: string;
  preview: string;
  status: ApprovalStatus;
  requested_at: number | string;
  expires_at: number | string;
  decided_by: string | null;
  decided_at: number | string | null;
  reason: string | null;
}

function fromRow(row: Row): Approval {
  return {
    id: row.id,
    tenant: row.tenant,
    tool: row.tool,
    idempotencyKey: row.idempotency_key,
    contentHash: row.content_hash,
    input: JSON.parse(row.input),
    preview: JSON.parse(row.preview),
    status: row.status,
    requestedAt: Number(row.requested_at),
    expiresAt: Number(row.expires_at),
    decidedBy: row.decided_by,
    decidedAt: row.decided_at === null ? null : Number(row.decided_at),
    reason: row.reason,
  };
}

/** Reads an approval. */
export async function getApproval(db: Db, id: string): Promise<Approval | null> {
  const [row] = await db.all<Row>('SELECT * FROM oncely_approvals WHERE id = ?', [id]);
  return row ? fromRow(row) : null;
}

/** Lists approvals, newest first. */
export async function listApprovals(db: Db, status?: ApprovalStatus): Promise<Approval[]> {
  const rows = status
    ? await db.all<Row>('SELECT * FROM oncely_approvals WHERE status = ? ORDER BY requested_at DESC', [status])
    : await db.all<Row>('SELECT * FROM oncely_approvals ORDER BY requested_at DESC');
  return rows.map(fromRow);
}

/** Records a pending approval unless one exists for this intent; returns the stored one, and whether this call made it. */
export async function requestApproval(
  db: Db,
  approval: Omit<Approval, 'status' | 'decidedBy' | 'decidedAt' | 'reason'>,
): Promise<{ approval: Approval; created: boolean }> {
  const created = await db.run(
    `INSERT INTO oncely_approvals (id, tenant, tool, idempotency_key, content_hash, input, preview, status, requested_at, expires_at)
     VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?) ON CONFLICT (id) DO NOTHING`,
    [
      approval.id,
      approval.tenant,
      approval.tool,
      approval.idempotencyKey,
      approval.contentHash,
      JSON.stringify(approval.input),
      JSON.stringify(approval.preview),
      approval.requestedAt,
      approval.expiresAt,
    ],
  );
  return { approval: (await getApproval(db, approval.id)) as Approval, created: created === 1 };
}

/**
 * Moves a pending approval to `to`, if it is still pending and (for approvals) not expired; one
 * caller wins. A late decision turns it `expired` instead. Returns the approval as it now stands,
 * and the status this call moved it to (null when it decided nothing: decided before, or unknown).
 */
export async function decideApproval(
  db: Db,
  id: string,
  to: 'approved' | 'rejected',
  by: string,
  reason: string | null,
  now = Date.now(),
): Promise<{ approval: Approval | null; decided: 'approved' | 'rejected' | 'expired' | null }> {
  const decided = await db.transaction(async (tx) => {
    const changed = await tx.run(
      `UPDATE oncely_approvals SET status = ?, decided_by = ?, decided_at = ?, reason = ? WHERE id = ? AND status = 'pending' AND expires_at > ?`,
      [to, by, now, reason, id, now],
    );
    if (changed === 1) return to;
    const expired = await tx.run(
      `UPDATE oncely_approvals SET status = 'expired', decided_at = ? WHERE id = ? AND status = 'pending' AND expires_at <= ?`,
      [now, id, now],
    );
    return expired === 1 ? 'expired' : null;
  });
  return { approval: await getApproval(db, id), decided };
}

/**
 * Records the expiry of a pending approval whose time ran out, so a caller learns it can never be
 * approved instead of waiting. Returns the approval as it now stands, and whether this call expired it.
 */
export async function expireIfDue(
  db: Db,
  id: string,
  now = Date.now(),
): Promise<{ approval: Approval | null; expired: boolean }> {
  const expired = await db.run(
    `UPDATE oncely_approvals SET status = 'expired', decided_at = ? WHERE id = ? AND status = 'pending' AND expires_at <= ?`,
    [now, id, now],
  );
  return { approval: await getApproval(db, id), expired: expired === 1 };
}
