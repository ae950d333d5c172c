/** The agent page: approvals with their decisions, credit balances and the open reservations. */
import { type Act, change, read } from './api.js';
import { type Child, h } from './dom.js';
import { json, when } from './format.js';
import { filters, query, row, table } from './widgets.js';

/** The agent page's parameters with the reservations' cursor as `reservations` (the approvals keep theirs). */
function nextReservations(params: URLSearchParams, cursor: string): URLSearchParams {
  const next = new URLSearchParams(params);
  next.set('reservations', cursor);
  return next;
}

/** The agent page: pending approvals unless filtered, every credit account, the open reservations. */
export async function agent(params: URLSearchParams, act: Act): Promise<Child[]> {
  const account = params.get('account');
  const held = new URLSearchParams();
  if (account) held.set('account', account);
  const cursor = params.get('reservations');
  if (cursor) held.set('cursor', cursor);
  const [approvals, credits, reservations] = await Promise.all([
    read.approvals(query(params, ['status']) || '?status=pending'),
    read.credits(),
    read.reservations(String(held) ? `?${held}` : ''),
  ]);
  const rows = approvals.approvals.map((a) => {
    const decide: Child[] = [];
    if (a.status === 'pending') {
      decide.push(
        h('button', {
          type: 'button',
          text: `Approve ${a.id}`,
          onclick: () =>
            act(
              `Approve ${a.tool} ${a.idempotencyKey}? The tool sends exactly this content on its next call.`,
              () => change.approve(a.id),
              () => 'Approved.',
            ),
        }),
        h('button', {
          type: 'button',
          class: 'danger',
          text: `Reject ${a.id}`,
          onclick: () =>
            act(
              `Reject ${a.tool} ${a.idempotencyKey}?`,
              () => change.reject(a.id),
              () => 'Rejected.',
            ),
        }),
      );
    }
    return row(
      `${a.tool} ${a.idempotencyKey}`,
      h('pre', { text: json(a.preview) }),
      h('code', { class: 'hash', text: a.contentHash }),
      a.status,
      a.decidedBy ? `${a.decidedBy} at ${when(a.decidedAt)}` : `asked ${when(a.requestedAt)}`,
      h('span', {}, decide),
    );
  });
  return [
    h('h2', { text: 'Agent' }),
    filters('agent', params, [
      ['status', 'Approval status', ['pending', 'approved', 'rejected', 'expired']],
      ['account', 'Reservations of account'],
    ]),
    table(
      'Approvals',
      ['Intent', 'Previewed content', 'Content hash (SHA-256)', 'Status', 'Who, when', ''],
      rows,
      'approvals',
    ),
    table(
      'Credits',
      ['Account', 'Available', 'Held by open reservations'],
      credits.accounts.map((c) => row(c.account, String(c.balance), String(c.reserved))),
      'credits',
    ),
    table(
      account ? `Open credit reservations of ${account}, newest first` : 'Open credit reservations, newest first',
      ['Account', 'Credits', 'Call (tenant / tool / key)', 'Action id', 'Record', 'Reserved', 'Expires'],
      reservations.reservations.map((r) =>
        row(
          r.account,
          String(r.credits),
          r.tool ? `${r.tenant} / ${r.tool} / ${r.key}` : 'not found (its record finished or expired)',
          h('code', { class: 'hash', text: r.actionId }),
          r.recordState
            ? `${r.recordState}${r.traceId ? `, trace ${r.traceId}` : ''}`
            : r.traceId
              ? `trace ${r.traceId}`
              : null,
          when(r.reservedAt),
          when(r.expiresAt),
        ),
      ),
      'reservations',
    ),
    reservations.cursor
      ? h(
          'p',
          {},
          h('a', {
            href: `#agent?${nextReservations(params, reservations.cursor)}`,
            text: 'Next page of reservations',
          }),
        )
      : null,
  ];
}
