import type { AnyErrorCode } from '../core/errors.js';
import type { Approval } from './approvals.js';

/**
 * What a model learns from a call. `already_sent` means the effect happened on an earlier call:
 * the model must not "repair" it by sending again. `read` is a read-only tool's answer: nothing changed.
 */
export type DeliveryState = 'sent' | 'already_sent' | 'read' | 'pending_approval' | 'rejected' | 'failed' | 'unknown';

/** What the model should do next. */
export type NextAction = 'continue' | 'wait' | 'stop';

/** The one shape every tool call returns, to models and to code. */
export interface ToolEnvelope<O = unknown> {
  success: boolean;
  data: O | null;
  deliveryState: DeliveryState;
  idempotencyKey: string | null;
  actionId: string | null;
  /** When the effect first happened (ms since epoch), for sent and already_sent. */
  firstExecutedAt: number | null;
  traceId: string | null;
  requestId: string;
  nextAction: NextAction;
  /** Set while an approval is pending, and on its outcome. */
  approvalId?: string;
  /**
   * Why a call did not succeed: a stable code (the catalogue's, or the one a tool's own error
   * carried) and a sentence a model can act on.
   */
  error?: { code: AnyErrorCode; message: string };
  /** One line for the model. */
  message: string;
}

const NEXT: Record<DeliveryState, NextAction> = {
  sent: 'continue',
  already_sent: 'continue',
  read: 'continue',
  pending_approval: 'wait',
  rejected: 'stop',
  failed: 'stop',
  unknown: 'stop',
};

/** The next action that goes with a delivery state (a transient failure may override it to 'wait'). */
export function nextActionOf(state: DeliveryState): NextAction {
  return NEXT[state];
}

/** An envelope of a delivery state, its ids and a line for the model. */
export function envelopeOf(
  state: DeliveryState,
  requestId: string,
  ids: { key: string | null; actionId: string | null },
  traceId: string | null,
  message: string,
): ToolEnvelope {
  return {
    success: state === 'sent' || state === 'already_sent' || state === 'read',
    data: null,
    deliveryState: state,
    idempotencyKey: ids.key,
    actionId: ids.actionId,
    firstExecutedAt: null,
    traceId,
    requestId,
    nextAction: nextActionOf(state),
    message,
  };
}

/** The envelope of a call that failed with `code`. */
export function failedEnvelope(
  requestId: string,
  code: AnyErrorCode,
  message: string,
  ids: { key: string | null; actionId: string | null } = { key: null, actionId: null },
): ToolEnvelope {
  return { ...envelopeOf('failed', requestId, ids, null, message), error: { code, message } };
}

/** The envelope with the approval it is about. */
export function withApproval(result: ToolEnvelope, approval: Approval): ToolEnvelope {
  return { ...result, approvalId: approval.id };
}

/** The envelope of an approval's state: pending (wait), approved (under way), rejected or expired (stop). */
export function approvalEnvelope(approval: Approval, requestId: string, key: string, actionId: string): ToolEnvelope {
  const base = { key, actionId };
  if (approval.status === 'pending')
    return withApproval(
      envelopeOf(
        'pending_approval',
        requestId,
        base,
        null,
        `awaiting approval ${approval.id}; do not call again, wait`,
      ),
      approval,
    );
  if (approval.status === 'approved')
    return withApproval(envelopeOf('unknown', requestId, base, null, 'approved; execution is under way'), approval);
  const why =
    approval.status === 'expired'
      ? 'the approval expired'
      : `rejected by ${approval.decidedBy}${approval.reason ? `: ${approval.reason}` : ''}`;
  return withApproval(
    {
      ...envelopeOf('rejected', requestId, base, null, `${why}; do not send`),
      error: { code: approval.status === 'expired' ? 'APPROVAL_EXPIRED' : 'REJECTED', message: why },
    },
    approval,
  );
}
