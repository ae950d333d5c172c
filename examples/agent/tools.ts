/**
 * The example agent's tool: the sendReviewNotice, sending through a mailer that keeps an
 * outbox table and does no deduplication of its own, so every e-mail it holds was really sent.
 */

import { defineTool } from 'oncely/agent';
import type { Db } from 'oncely/db';
import { z } from 'zod';

/** A mailer writing each e-mail to `agent_example_outbox`; `delayMs` makes it slow, like SMTP on a bad day. */
export class OutboxMailer {
  constructor(
    private readonly db: Db,
    private readonly delayMs = 0,
  ) {}

  async migrate(): Promise<void> {
    await this.db.run(`CREATE TABLE IF NOT EXISTS agent_example_outbox (
      tenant TEXT NOT NULL, idempotency_key TEXT NOT NULL, recipient TEXT NOT NULL, body TEXT NOT NULL, sent_at BIGINT NOT NULL)`);
  }

  async send(
    tenant: string,
    message: { to: string; body: string },
    options: { idempotencyKey: string },
  ): Promise<{ messageId: string; to: string; body: string }> {
    if (this.delayMs) await new Promise((r) => setTimeout(r, this.delayMs));
    const sentAt = Date.now();
    await this.db.run(
      'INSERT INTO agent_example_outbox (tenant, idempotency_key, recipient, body, sent_at) VALUES (?, ?, ?, ?, ?)',
      [tenant, options.idempotencyKey, message.to, message.body, sentAt],
    );
    return { messageId: `${options.idempotencyKey}@${sentAt}`, ...message };
  }

  /** The e-mails sent for a tenant. */
  async sent(tenant: string): Promise<{ recipient: string; body: string }[]> {
    return this.db.all('SELECT recipient, body FROM agent_example_outbox WHERE tenant = ? ORDER BY sent_at', [tenant]);
  }
}

/** The sendReviewNotice without its sender: the key is the task, recipient, template and version; the body may be rephrased. */
export const reviewNotice = {
  name: 'sendReviewNotice',
  input: z.object({
    taskId: z.string(),
    recipientId: z.string(),
    templateId: z.string(),
    entityVersion: z.number(),
    body: z.string(),
  }),
  idempotency: {
    keyFields: ['taskId', 'recipientId', 'templateId', 'entityVersion'],
    ttl: 'permanent',
  },
  outbound: {
    preview: (i: { recipientId: string; body: string }) => ({ to: i.recipientId, body: i.body }),
    approval: 'none',
  },
  cost: { credits: 1, account: (ctx: { tenant: string }) => ctx.tenant },
} as const;

/** sendReviewNotice sending through the example's mailer. */
export function sendReviewNotice(mailer: OutboxMailer) {
  return defineTool({
    ...reviewNotice,
    description:
      'Sends the review notice of a task version to one recipient. Calling it again for the same task, recipient, template and version sends nothing more.',
    execute: (input, ctx) =>
      mailer.send(ctx.tenant, { to: input.recipientId, body: input.body }, { idempotencyKey: ctx.idempotencyKey }),
  });
}
