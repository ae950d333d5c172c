/** The records: the filtered list, one record's fields, and the form that settles an unknown one. */
import { type Act, change, read, type Settle, type ShownRecord } from './api.js';
import { type Child, h, say } from './dom.js';
import { when } from './format.js';
import { fields, filters, more, query, row, table } from './widgets.js';

/** The records page: newest first, filtered by the hash's parameters. */
export async function records(params: URLSearchParams): Promise<Child[]> {
  const page = await read.records(query(params, ['state', 'action', 'tenant', 'olderThan', 'cursor']));
  return [
    h('h2', { text: 'Records' }),
    filters('records', params, [
      ['state', 'State', ['in_progress', 'succeeded', 'failed', 'released', 'unknown']],
      ['action', 'Action'],
      ['tenant', 'Tenant'],
      ['olderThan', 'Older than (e.g. 10m)'],
    ]),
    table(
      'Records, newest first',
      ['Record', 'State', 'Attempts', 'Settled by', 'Updated'],
      page.records.map((r) =>
        row(
          h('a', { href: `#record/${encodeURIComponent(r.ref)}`, text: `${r.tenant} / ${r.action} / ${r.key}` }),
          r.state,
          String(r.attempts),
          r.settlement ? `${r.settlement.by} (${r.settlement.answer})` : null,
          when(r.updatedAt),
        ),
      ),
      'records',
    ),
    more('records', params, page.cursor),
  ];
}

const REQUEST_IDS =
  "not stored on the record: each attempt's request id is in its answer (X-Request-Id, the envelope's requestId), its log lines and the decision hook (onDecision), beside this trace id";

/** One record's page: every field, and the settle form while it is unknown. */
export async function record(ref: string, act: Act): Promise<Child[]> {
  const r = await read.record(ref);
  // A record keeps the intent's trace id, not its attempts' request ids: say where those are, beside it.
  const shown: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(r)) {
    shown[k] = v;
    if (k === 'traceId') shown.requestIds = REQUEST_IDS;
  }
  const out: Child[] = [h('h2', { text: `Record ${r.tenant} / ${r.action} / ${r.key}` }), fields(shown)];
  if (r.state === 'unknown') out.push(settleForm(r, act));
  return out;
}

/** The answer the form gives: a value (JSON), an error, or a retry; undefined when the value is not JSON. */
function settlement(data: FormData): Settle | undefined {
  const how = String(data.get('how'));
  if (how === 'value') {
    try {
      return { value: JSON.parse(String(data.get('value') || 'null')) };
    } catch {
      return undefined;
    }
  }
  if (how === 'error') {
    const code = String(data.get('code') ?? '').trim();
    const message = String(data.get('message'));
    return { error: code ? { message, code } : { message } };
  }
  return { retry: true };
}

function settleForm(r: ShownRecord, act: Act) {
  const form = h(
    'form',
    {
      class: 'settle',
      'aria-labelledby': 'settle-title',
      onsubmit: async (event) => {
        event.preventDefault();
        const data = new FormData(form);
        const how = String(data.get('how'));
        const note = String(data.get('note') ?? '').trim();
        const answer = settlement(data);
        if (!answer) return say('The value must be JSON, e.g. {"charged":true}');
        await act(
          `Settle ${r.ref} with ${how === 'retry' ? 'a retry' : `this ${how}`}? Callers get it from now on.`,
          () => change.settle(r.ref, note ? { ...answer, note } : answer),
          () => 'Settled.',
        );
      },
    },
    h('h3', { id: 'settle-title', text: 'Settle this unknown record' }),
    h(
      'fieldset',
      {},
      h('legend', { text: 'Answer' }),
      [
        ['value', 'A value (what the action returned)'],
        ['error', 'An error (the action failed)'],
        ['retry', 'Retry (release the key)'],
      ].map(([value, label], i) =>
        h('label', {}, h('input', { type: 'radio', name: 'how', value, checked: i === 0 }), ` ${label}`),
      ),
    ),
    h('label', { for: 's-value', text: 'Value (JSON)' }),
    h('textarea', { id: 's-value', name: 'value', rows: 3 }),
    h('label', { for: 's-message', text: 'Error message' }),
    h('input', { id: 's-message', name: 'message' }),
    h('label', { for: 's-code', text: 'Error code (e.g. CARD_DECLINED)' }),
    h('input', { id: 's-code', name: 'code' }),
    h('label', { for: 's-note', text: 'Note (the downstream reference)' }),
    h('input', { id: 's-note', name: 'note' }),
    h('button', { type: 'submit', text: 'Settle…' }),
  );
  return form;
}
