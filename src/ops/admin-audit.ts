/**
 * The audit of the admin API: every request that changes something (resolve, replay, retry,
 * cancel, approve, reject) as one row of `oncely_admin_actions`, written before the change
 * (`started`) and finished after it (`done` or `refused`), so a crash in between leaves a row that
 * says an operator tried, rather than no trace.
 */

import { encodeCursor } from '../core/cursor.js';
import { type Migrations, migrate } from '../db/migrate.js';
import type { Db } from '../db/types.js';
import type { AdminIdentity } from './admin-auth.js';
import { decodeSortKey } from './admin-lists.js';

/**
 * Where an audited action ended: `done`, `refused` (its state did not allow it, nothing changed),
 * `failed` (the database failed during it: it may or may not have applied), or still `started`
 * when the process stopped, or the audit could not be written, before its end was recorded.
 */
export type AuditOutcome = 'started' | 'done' | 'refused' | 'failed';

/** One audited admin action. */
export interface AdminAction {
  id: number;
  /** Epoch ms of the request. */
  at: number;
  who: AdminIdentity['who'];
  operator: string | null;
  /** The route's action, e.g. `records.resolve`. */
  action: string;
  /** What it acted on: a record ref, `<source>/<event id>`, a workflow or approval id, `all`. */
  target: string;
  outcome: AuditOutcome;
  /** What was asked and answered (the resolution, the count replayed, the error code of a refusal). */
  detail: unknown;
}

const TABLE = (id: string) => `CREATE TABLE IF NOT EXISTS oncely_admin_actions (
  id ${id},
  at BIGINT NOT NULL,
  who TEXT NOT NULL,
  operator TEXT,
  action TEXT NOT NULL,
  target TEXT NOT NULL,
  outcome TEXT NOT NULL,
  detail TEXT NOT NULL
)`;

/** The admin component's versioned tables. */
export const adminMigrations: Migrations = {
  component: 'admin',
  steps: [
    {
      version: 1,
      sqlite: TABLE('INTEGER PRIMARY KEY AUTOINCREMENT'),
      postgres: TABLE('BIGSERIAL PRIMARY KEY'),
    },
  ],
};

/** Creates or upgrades the audit table; safe from several processes at once. */
export function migrateAdmin(db: Db): Promise<void> {
  return migrate(db, adminMigrations);
}

// A detail is for people reading the audit: a huge resolved value is cut, not stored whole twice.
const DETAIL_MAX = 8_000;
const detailText = (detail: unknown): string => {
  const text = JSON.stringify(detail ?? null);
  return text.length <= DETAIL_MAX ? text : JSON.stringify({ truncated: text.slice(0, DETAIL_MAX) });
};

/** Writes and reads the audit table on the host's database. */
export class AdminAudit {
  constructor(private readonly db: Db) {}

  /** Records an action about to run; answers its id for `finish`. */
  async begin(identity: AdminIdentity, action: string, target: string, detail: unknown): Promise<number> {
    return this.insert(identity, action, target, 'started', detail);
  }

  /** Records how an action begun ended, with what it answered. */
  async finish(id: number, outcome: 'done' | 'refused' | 'failed', detail: unknown): Promise<void> {
    await this.db.run('UPDATE oncely_admin_actions SET outcome = ?, detail = ? WHERE id = ?', [
      outcome,
      detailText(detail),
      id,
    ]);
  }

  /** Records an action refused before it ran (its input was bad): one row, outcome `refused`. */
  async refused(identity: AdminIdentity, action: string, target: string, detail: unknown): Promise<void> {
    await this.insert(identity, action, target, 'refused', detail);
  }

  /** Newest first, a page at a time; pass `cursor` back for the next page, null after the last. */
  async list(limit: number, cursor?: string): Promise<{ actions: AdminAction[]; cursor: string | null }> {
    const before = cursor === undefined ? undefined : decodeSortKey(cursor, ['number'])[0];
    const rows = await this.db.all<Record<string, unknown>>(
      `SELECT id, at, who, operator, action, target, outcome, detail FROM oncely_admin_actions
      ${before === undefined ? '' : 'WHERE id < ?'} ORDER BY id DESC LIMIT ?`,
      before === undefined ? [limit] : [before, limit],
    );
    const actions = rows.map((r) => ({
      id: Number(r.id),
      at: Number(r.at),
      who: r.who as AdminIdentity['who'],
      operator: r.operator === null ? null : String(r.operator),
      action: String(r.action),
      target: String(r.target),
      outcome: r.outcome as AuditOutcome,
      detail: JSON.parse(String(r.detail)),
    }));
    const last = actions.at(-1);
    return { actions, cursor: actions.length === limit && last ? encodeCursor([last.id]) : null };
  }

  private async insert(
    identity: AdminIdentity,
    action: string,
    target: string,
    outcome: AuditOutcome,
    detail: unknown,
  ): Promise<number> {
    const [row] = await this.db.all<{ id: number | string }>(
      `INSERT INTO oncely_admin_actions (at, who, operator, action, target, outcome, detail)
      VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id`,
      [Date.now(), identity.who, identity.operator, action, target, outcome, detailText(detail)],
    );
    return Number(row?.id);
  }
}
