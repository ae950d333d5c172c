import { OncelyError } from '../core/errors.js';
import { validateKey } from '../core/key.js';
import { type Metrics, processMetrics } from '../core/metrics.js';
import type { Db, Sql } from '../db/types.js';

/**
 * A credit ledger with reservations bound to action ids: reserve, then confirm or release, never
 * twice; an action confirmed once is charged for good (`oncely_credit_charges`), never again. Each reservation made, confirmed or released is counted in `oncely_credits_total` under
 * the tool given (the runtime gives its tool's name; a reservation does not store it, so the
 * sweep's releases count under the tool '').
 */
export class Credits {
  constructor(
    private readonly db: Db,
    private readonly metrics: Metrics = processMetrics,
  ) {}

  /**
   * Adds credits to an account (a top-up; negative to take away), once per `key`: a retried
   * top-up with its key credits once and answers the balance; the same key with another amount is
   * KEY_REUSED, crediting nothing. Keys are the account's own (another account may use the same)
   * and kept for good. Without a key every call credits again: an operator's one-off adjustment.
   * @example await credits.grant('acme', 100, { key: 'invoice-2026-12-0042' }) // twice: credited once
   */
  async grant(account: string, credits: number, options: { key?: string } = {}): Promise<number> {
    if (!Number.isSafeInteger(credits))
      throw new OncelyError('INVALID_ARGUMENT', `credits must be a whole number, got ${credits}`);
    const key = options.key === undefined ? undefined : validateKey(options.key);
    await this.db.transaction(async (tx) => {
      if (key !== undefined) {
        const first = await tx.run(
          `INSERT INTO oncely_credit_grants (account, grant_key, credits, granted_at) VALUES (?, ?, ?, ?)
           ON CONFLICT (account, grant_key) DO NOTHING`,
          [account, key, credits, Date.now()],
        );
        if (first === 0) {
          const [row] = await tx.all<{ credits: number | string }>(
            'SELECT credits FROM oncely_credit_grants WHERE account = ? AND grant_key = ?',
            [account, key],
          );
          if (Number(row?.credits) === credits) return;
          throw new OncelyError(
            'KEY_REUSED',
            `grant key "${key}" of account ${account} was first used for ${row?.credits} credit(s), not ${credits}`,
          );
        }
      }
      await tx.run(
        'INSERT INTO oncely_credit_accounts (account, balance) VALUES (?, 0) ON CONFLICT (account) DO NOTHING',
        [account],
      );
      await tx.run('UPDATE oncely_credit_accounts SET balance = balance + ? WHERE account = ?', [credits, account]);
    });
    return this.balance(account);
  }

  /** Credits available: the balance minus what is reserved. */
  async balance(account: string): Promise<number> {
    const [row] = await this.db.all<{ balance: number | string }>(
      'SELECT balance FROM oncely_credit_accounts WHERE account = ?',
      [account],
    );
    return Number(row?.balance ?? 0);
  }

  /** The reservation of an action, if any. */
  async reservation(actionId: string): Promise<{ account: string; credits: number; status: string } | null> {
    const [row] = await this.db.all<{ account: string; credits: number | string; status: string }>(
      'SELECT account, credits, status FROM oncely_credit_reservations WHERE action_id = ?',
      [actionId],
    );
    return row ? { account: row.account, credits: Number(row.credits), status: row.status } : null;
  }

  /** When an action was charged, if it ever was (kept for good, whatever became of its reservation). */
  async chargedAt(actionId: string): Promise<number | null> {
    const [row] = await this.db.all<{ charged_at: number | string }>(
      'SELECT charged_at FROM oncely_credit_charges WHERE action_id = ?',
      [actionId],
    );
    return row ? Number(row.charged_at) : null;
  }

  /**
   * Holds `credits` for `actionId`, or fails with BUDGET_EXCEEDED. A retry of the same action finds
   * its reservation and holds nothing more (`'held'`); a released one is held again. An action
   * charged before is never held nor charged again: `'charged'`, whatever its record's TTL did.
   * Every step is a conditional write, so two processes racing on one action hold its credits
   * once. `life` is the record's trace id that holds it (for the admin pages); `tool` the label it
   * is counted under.
   */
  async reserve(
    account: string,
    credits: number,
    actionId: string,
    expiresAt: number,
    life = '',
    tool = '',
  ): Promise<'reserved' | 'held' | 'charged'> {
    const outcome = await this.db.transaction(async (tx) => {
      const charged = await tx.all('SELECT 1 AS one FROM oncely_credit_charges WHERE action_id = ?', [actionId]);
      if (charged.length) return 'charged' as const;
      const created = await tx.run(
        `INSERT INTO oncely_credit_reservations (action_id, account, credits, status, created_at, expires_at, life)
         VALUES (?, ?, ?, 'reserved', ?, ?, ?) ON CONFLICT (action_id) DO NOTHING`,
        [actionId, account, credits, Date.now(), expiresAt, life],
      );
      const revived =
        created === 0 &&
        (await tx.run(
          `UPDATE oncely_credit_reservations SET status = 'reserved', expires_at = ?, settled_at = NULL, life = ?
           WHERE action_id = ? AND status = 'released'`,
          [expiresAt, life, actionId],
        )) === 1;
      if (created === 0 && !revived) {
        const extended = await tx.run(
          `UPDATE oncely_credit_reservations SET expires_at = ? WHERE action_id = ? AND status = 'reserved'`,
          [expiresAt, actionId],
        );
        // Confirmed but its charge row missing cannot happen (both are written in one transaction).
        return extended === 1 ? ('held' as const) : ('charged' as const);
      }
      const taken = await tx.run(
        'UPDATE oncely_credit_accounts SET balance = balance - ? WHERE account = ? AND balance >= ?',
        [credits, account, credits],
      );
      // Thrown inside the transaction: the reservation written above rolls back with it.
      if (taken !== 1)
        throw new OncelyError('BUDGET_EXCEEDED', `account ${account} has fewer than ${credits} credit(s) left`);
      return 'reserved' as const;
    });
    if (outcome === 'reserved') this.metrics.add('oncely_credits_total', [tool, 'reserved']);
    return outcome;
  }

  /**
   * Makes a reservation final and records the action's charge for good. One the sweep released
   * meanwhile (its call ran past the reservation's expiry) is charged again, its effect did
   * happen, but only from credits the account still has: a balance never goes negative. When the
   * released credits were spent meanwhile, RESERVATION_EXPIRED, and nothing is charged.
   */
  async confirm(actionId: string, tool = ''): Promise<void> {
    const confirmed = await this.db.transaction(async (tx) => {
      const now = Date.now();
      const [row] = await tx.all<{ account: string; credits: number | string; status: string }>(
        `SELECT account, credits, status FROM oncely_credit_reservations WHERE action_id = ? AND status IN ('reserved', 'released')`,
        [actionId],
      );
      if (!row) return false;
      const changed = await tx.run(
        `UPDATE oncely_credit_reservations SET status = 'confirmed', settled_at = ? WHERE action_id = ? AND status = ?`,
        [now, actionId, row.status],
      );
      if (changed !== 1) return false;
      const credits = Number(row.credits);
      await tx.run('INSERT INTO oncely_credit_charges (action_id, account, credits, charged_at) VALUES (?, ?, ?, ?)', [
        actionId,
        row.account,
        credits,
        now,
      ]);
      if (row.status === 'released') {
        const taken = await tx.run(
          'UPDATE oncely_credit_accounts SET balance = balance - ? WHERE account = ? AND balance >= ?',
          [credits, row.account, credits],
        );
        // Thrown inside the transaction: the confirmation and the charge roll back with it.
        if (taken !== 1)
          throw new OncelyError(
            'RESERVATION_EXPIRED',
            `action ${actionId} ran past its reservation, which the sweep released, and account ${row.account} has fewer than ${credits} credit(s) left to charge it`,
          );
      }
      return true;
    });
    if (confirmed) this.metrics.add('oncely_credits_total', [tool, 'confirmed']);
  }

  /** Gives a reservation's credits back (failure, rejection); a confirmed one is never released. */
  async release(actionId: string, tool = ''): Promise<void> {
    const released = await this.db.transaction(async (tx) => {
      const changed = await tx.run(
        `UPDATE oncely_credit_reservations SET status = 'released', settled_at = ? WHERE action_id = ? AND status = 'reserved'`,
        [Date.now(), actionId],
      );
      if (changed === 1) await this.giveBack(tx, actionId);
      return changed === 1;
    });
    if (released) this.metrics.add('oncely_credits_total', [tool, 'released']);
  }

  /** Moves a reservation's credits back into its account's balance. */
  private async giveBack(tx: Sql, actionId: string): Promise<void> {
    const [row] = await tx.all<{ account: string; credits: number | string }>(
      'SELECT account, credits FROM oncely_credit_reservations WHERE action_id = ?',
      [actionId],
    );
    if (row)
      await tx.run('UPDATE oncely_credit_accounts SET balance = balance + ? WHERE account = ?', [
        Number(row.credits),
        row.account,
      ]);
  }

  /** Releases reservations whose holder vanished (crashed and never retried) past their expiry; returns how many. */
  async sweep(now = Date.now()): Promise<number> {
    const expired = await this.db.all<{ action_id: string }>(
      `SELECT action_id FROM oncely_credit_reservations WHERE status = 'reserved' AND expires_at <= ? LIMIT 500`,
      [now],
    );
    for (const row of expired) await this.release(row.action_id);
    return expired.length;
  }
}
