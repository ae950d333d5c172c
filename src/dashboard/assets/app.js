// The oncely dashboard: plain DOM, no framework. Every value from the admin API is set as text
// (never as HTML), and the token lives in sessionStorage (this tab only) and goes out as a bearer
// header: no cookie, so another site's page cannot act with it.
const API = document.body.dataset.api;
const main = document.getElementById('main');
const status = document.getElementById('status');
const login = document.getElementById('login');
const forget = document.getElementById('forget');
const POLL_MS = 5000;
let poll;

/** An element with attributes (`on*` functions become listeners) and children (strings become text). */
function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
    else if (name === 'text') node.textContent = value;
    else node.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat(Number.POSITIVE_INFINITY))
    if (child !== null && child !== undefined) node.append(child);
  return node;
}

const svgNs = 'http://www.w3.org/2000/svg';
const when = (ms) =>
  ms === null || ms === undefined ? '-' : new Date(Number(ms)).toISOString().replace('T', ' ').slice(0, 19);
const percent = (v) => (v === null || v === undefined ? 'n/a' : `${(v * 100).toFixed(v === 1 || v === 0 ? 0 : 2)}%`);
const json = (v) => JSON.stringify(v, null, 2);
const say = (text) => {
  status.textContent = text;
};

class Denied extends Error {}

/** One admin API call: the data of its envelope, or an Error with the API's message. */
async function api(path, { method = 'GET', body } = {}) {
  const headers = {};
  const token = sessionStorage.getItem('oncely.token');
  const operator = sessionStorage.getItem('oncely.operator');
  if (token) headers.authorization = `Bearer ${token}`;
  if (operator) headers['x-oncely-operator'] = operator;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(API + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const answer = await res.json().catch(() => ({ error: { code: 'BAD_ANSWER', message: `HTTP ${res.status}` } }));
  if (res.status === 401 || res.status === 403) {
    showLogin(answer.error?.message ?? `HTTP ${res.status}`);
    throw new Denied(answer.error?.message);
  }
  if (!res.ok) throw new Error(`${answer.error?.code}: ${answer.error?.message}`);
  return answer.data;
}

function showLogin(message) {
  clearInterval(poll);
  main.replaceChildren();
  login.hidden = false;
  forget.hidden = true;
  document.getElementById('login-error').textContent = sessionStorage.getItem('oncely.token')
    ? `Refused: ${message}`
    : message;
  document.getElementById('token').focus();
}

login.addEventListener('submit', (event) => {
  event.preventDefault();
  sessionStorage.setItem('oncely.token', document.getElementById('token').value.trim());
  const operator = document.getElementById('operator').value.trim();
  if (operator) sessionStorage.setItem('oncely.operator', operator);
  else sessionStorage.removeItem('oncely.operator');
  document.getElementById('token').value = '';
  route();
});
forget.addEventListener('click', () => {
  sessionStorage.removeItem('oncely.token');
  sessionStorage.removeItem('oncely.operator');
  showLogin('The token is forgotten.');
});

/** Asks before a change; resolves true when the person confirmed. */
function confirmed(text) {
  const dialog = document.getElementById('confirm');
  document.getElementById('confirm-text').textContent = text;
  const back = document.activeElement;
  return new Promise((resolve) => {
    const done = (answer) => {
      dialog.close();
      ok.removeEventListener('click', yes);
      cancel.removeEventListener('click', no);
      back?.focus?.();
      resolve(answer);
    };
    const ok = document.getElementById('confirm-ok');
    const cancel = document.getElementById('confirm-cancel');
    const yes = () => done(true);
    const no = () => done(false);
    ok.addEventListener('click', yes);
    cancel.addEventListener('click', no);
    dialog.addEventListener('cancel', no, { once: true });
    dialog.showModal();
    cancel.focus();
  });
}

/** Runs a change after its confirmation, redraws the page, then says how it went (so what it says matches what is shown). */
async function act(question, path, body, done) {
  if (!(await confirmed(question))) return say('Cancelled: nothing changed.');
  let data;
  try {
    data = await api(path, { method: 'POST', body: body ?? {} });
  } catch (error) {
    if (!(error instanceof Denied)) say(`Refused: ${error.message}`);
    return;
  }
  await route();
  say(done(data));
}

function table(caption, columns, rows, testid) {
  return h(
    'table',
    { 'data-testid': testid },
    h('caption', { text: caption }),
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        columns.map((c) => h('th', { scope: 'col', text: c })),
      ),
    ),
    h('tbody', {}, rows.length === 0 ? h('tr', {}, h('td', { colspan: columns.length, text: 'none' })) : rows),
  );
}

const row = (...cells) =>
  h(
    'tr',
    {},
    cells.map((c) => (c instanceof Node ? h('td', {}, c) : h('td', { text: c ?? '-' }))),
  );

/** A line of the rate's value at each sample: the chart of one window. */
function sparkline(samples, name, label) {
  const w = 160;
  const ht = 36;
  const svg = document.createElementNS(svgNs, 'svg');
  svg.setAttribute('viewBox', `0 0 ${w} ${ht}`);
  svg.setAttribute('role', 'img');
  const points = samples.map((s) => [s.at, s.rates[name]]).filter(([, v]) => v !== null);
  const title = document.createElementNS(svgNs, 'title');
  title.textContent = `${label}: ${points.length} samples`;
  svg.append(title);
  if (points.length === 0) return svg;
  const first = points[0][0];
  const span = Math.max(1, points[points.length - 1][0] - first);
  const xy = points.map(([at, v]) => `${((at - first) / span) * (w - 4) + 2},${ht - 2 - v * (ht - 4)}`);
  const line = document.createElementNS(svgNs, 'polyline');
  line.setAttribute(
    'points',
    points.length === 1 ? `2,${xy[0].split(',')[1]} ${w - 2},${xy[0].split(',')[1]}` : xy.join(' '),
  );
  line.setAttribute('fill', 'none');
  line.setAttribute('stroke', 'currentColor');
  line.setAttribute('stroke-width', '2');
  svg.append(line);
  return svg;
}

/** Duplicates answered without executing since the oldest sample of the last hour (the totals grow only). */
function stoppedLastHour(now, samples) {
  if (samples.length === 0) return h('p', { text: 'duplicates stopped in the last hour: no sample yet' });
  const stopped = now.duplicatesIntercepted - samples[0].rateTotals.duplicatesIntercepted;
  const passed = now.duplicates - samples[0].rateTotals.duplicates - stopped;
  return h('p', {
    'data-testid': 'stopped',
    text: `${stopped} duplicates stopped in the last hour, ${passed} let through`,
  });
}

const RATES = [
  ['duplicateInterception', 'Duplicate interception'],
  ['keyHit', 'Key hit'],
  ['staleDrop', 'Stale drop'],
  ['compensationSuccess', 'Compensation success'],
];

function counts(title, values, prefix) {
  const entries = Object.entries(values).sort();
  return h(
    'section',
    { class: 'card', 'aria-label': title },
    h('h3', { text: title }),
    h(
      'dl',
      {},
      entries.length === 0 ? h('dd', { text: 'none' }) : null,
      entries.map(([k, v]) => [h('dt', { text: k }), h('dd', { 'data-count': `${prefix}.${k}`, text: String(v) })]),
    ),
  );
}

async function overview() {
  const [stats, counted, hour, day, audit] = await Promise.all([
    api('/stats'),
    api('/overview'),
    api('/series?window=1h'),
    api('/series?window=24h'),
    api('/audit?limit=10'),
  ]);
  const cards = RATES.map(([name, label]) => {
    const { value, target } = stats.rates[name];
    const met = target === null || value === null ? null : value >= target;
    return h(
      'section',
      { class: 'card rate', 'aria-label': label, 'data-rate': name },
      h('h3', { text: label }),
      h('p', { class: 'value', text: percent(value) }),
      h(
        'p',
        { class: met === false ? 'bad' : 'good' },
        target === null
          ? 'no target'
          : `target at least ${percent(target)}: ${met === null ? 'nothing counted yet' : met ? 'met' : 'NOT met'}`,
      ),
      name === 'duplicateInterception' ? stoppedLastHour(stats.rateTotals, hour.samples) : null,
      h('figure', {}, sparkline(hour.samples, name, `${label}, last hour`), h('figcaption', { text: 'last hour' })),
      h('figure', {}, sparkline(day.samples, name, `${label}, last day`), h('figcaption', { text: 'last day' })),
    );
  });
  return [
    h('h2', { text: 'Overview' }),
    h('div', { class: 'grid' }, cards),
    h(
      'div',
      { class: 'grid' },
      counts('Records by state', counted.records, 'records'),
      counts('Events by status', counted.events, 'events'),
      counts('Flows by status', counted.flows, 'flows'),
      counts('Approvals by status', counted.approvals, 'approvals'),
    ),
    table(
      'Recent admin actions',
      ['When', 'Who', 'Action', 'Target', 'Outcome'],
      audit.actions.map((a) =>
        row(when(a.at), a.operator ? `${a.who}:${a.operator}` : a.who, a.action, a.target, a.outcome),
      ),
      'audit',
    ),
  ];
}

/** A filter form of `fields` ([name, label, options?]) that redraws the page with them in the hash. */
function filters(page, params, fields) {
  const form = h(
    'form',
    {
      class: 'filters',
      'aria-label': 'Filters',
      onsubmit: (event) => {
        event.preventDefault();
        const chosen = new URLSearchParams();
        for (const [name, value] of new FormData(form)) if (value) chosen.set(name, String(value));
        location.hash = `${page}?${chosen}`;
      },
    },
    fields.map(([name, label, options]) => {
      const id = `f-${name}`;
      const control = options
        ? h(
            'select',
            { id, name },
            h('option', { value: '', text: 'any' }),
            options.map((o) => h('option', { value: o, selected: params.get(name) === o, text: o })),
          )
        : h('input', { id, name, value: params.get(name) ?? '' });
      return h('span', {}, h('label', { for: id, text: label }), control);
    }),
    h('button', { type: 'submit', text: 'Apply' }),
  );
  return form;
}

const query = (params, names) => {
  const out = new URLSearchParams();
  for (const n of names) if (params.get(n)) out.set(n, params.get(n));
  const text = out.toString();
  return text ? `?${text}` : '';
};

async function records(params) {
  const page = await api(`/records${query(params, ['state', 'action', 'tenant', 'olderThan', 'cursor'])}`);
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

function more(page, params, cursor) {
  if (!cursor) return null;
  const next = new URLSearchParams(params);
  next.set('cursor', cursor);
  return h('p', {}, h('a', { href: `#${page}?${next}`, text: 'Next page' }));
}

/** Every field of an object as a definition list; objects as JSON, times as dates. */
function fields(object) {
  return h(
    'dl',
    { class: 'fields' },
    Object.entries(object).map(([k, v]) => [
      h('dt', { text: k }),
      h(
        'dd',
        {},
        v !== null && typeof v === 'object'
          ? h('pre', { text: json(v) })
          : /At$/.test(k) && typeof v === 'number'
            ? when(v)
            : String(v ?? '-'),
      ),
    ]),
  );
}

const REQUEST_IDS =
  "not stored on the record: each attempt's request id is in its answer (X-Request-Id, the envelope's requestId), its log lines and the decision hook (onDecision), beside this trace id";

async function record(ref) {
  const r = await api(`/records/${encodeURIComponent(ref)}`);
  // A record keeps the intent's trace id, not its attempts' request ids: say where those are, beside it.
  const shown = {};
  for (const [k, v] of Object.entries(r)) {
    shown[k] = v;
    if (k === 'traceId') shown.requestIds = REQUEST_IDS;
  }
  const out = [h('h2', { text: `Record ${r.tenant} / ${r.action} / ${r.key}` }), fields(shown)];
  if (r.state === 'unknown') out.push(settleForm(r));
  return out;
}

function settleForm(r) {
  const form = h(
    'form',
    {
      class: 'settle',
      'aria-labelledby': 'settle-title',
      onsubmit: async (event) => {
        event.preventDefault();
        const data = new FormData(form);
        const how = data.get('how');
        const note = String(data.get('note') ?? '').trim();
        let body;
        try {
          if (how === 'value') body = { value: JSON.parse(String(data.get('value') || 'null')) };
          else if (how === 'error') {
            const code = String(data.get('code') ?? '').trim();
            body = {
              error: code ? { message: String(data.get('message')), code } : { message: String(data.get('message')) },
            };
          } else body = { retry: true };
        } catch {
          return say('The value must be JSON, e.g. {"charged":true}');
        }
        if (note) body.note = note;
        await act(
          `Settle ${r.ref} with ${how === 'retry' ? 'a retry' : `this ${how}`}? Callers get it from now on.`,
          `/records/${encodeURIComponent(r.ref)}/resolve`,
          body,
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

async function events(params) {
  const [page, dead] = await Promise.all([
    api(`/events${query(params, ['status', 'source', 'cursor'])}`),
    api(`/events/dead${query(params, ['source'])}`),
  ]);
  const replay = (e) =>
    h('button', {
      type: 'button',
      text: `Replay ${e.eventId}`,
      onclick: () =>
        act(
          `Replay ${e.source}/${e.eventId}? Its consumer runs again from attempt 0.`,
          '/events/dead/replay',
          { source: e.source, id: e.eventId },
          (d) => `Replayed ${d.replayed}.`,
        ),
    });
  return [
    h('h2', { text: 'Events' }),
    filters('events', params, [
      ['status', 'Status', ['pending', 'processing', 'waiting', 'applied', 'stale', 'dead', 'no_consumer']],
      ['source', 'Source'],
    ]),
    table(
      'Dead letters',
      ['Event', 'Type', 'Attempts', 'Last error', ''],
      dead.deadLetters.map((e) => row(`${e.source}/${e.eventId}`, e.type, String(e.attempts), e.lastError, replay(e))),
      'dead-letters',
    ),
    dead.deadLetters.length > 0
      ? h('button', {
          type: 'button',
          text: 'Replay all dead letters',
          onclick: () =>
            act('Replay every dead letter?', '/events/dead/replay', { all: true }, (d) => `Replayed ${d.replayed}.`),
        })
      : null,
    table(
      'Recent events, newest first',
      ['Event', 'Type', 'Status', 'Attempts', 'Received'],
      page.events.map((e) => row(`${e.source}/${e.eventId}`, e.type, e.status, String(e.attempts), when(e.receivedAt))),
      'events',
    ),
    more('events', params, page.cursor),
  ];
}

async function flows(params) {
  const page = await api(`/flows${query(params, ['status', 'cursor'])}`);
  return [
    h('h2', { text: 'Flows' }),
    filters('flows', params, [
      ['status', 'Status', ['pending', 'running', 'waiting', 'completed', 'failed', 'cancelled']],
    ]),
    table(
      'Flows, newest first',
      ['Flow', 'Name', 'Status', 'Runs', 'Error', 'Updated'],
      page.flows.map((f) =>
        row(
          h('a', { href: `#flow/${encodeURIComponent(f.workflowId)}`, text: f.workflowId }),
          f.name,
          f.status,
          String(f.runs),
          f.error?.message,
          when(f.updatedAt),
        ),
      ),
      'flows',
    ),
    more('flows', params, page.cursor),
  ];
}

// The labels the admin API derives from the stored rows (src/ops/admin-timeline.ts).
function stepLabel(s) {
  const labels = [s.compensation ? `compensation ${s.status}` : s.status];
  if (s.memoized) labels.push(`memoized (stored by run ${s.run}, not run again)`);
  else if (s.memoized === false && s.status === 'completed') labels.push(`executed in run ${s.run}`);
  if (s.retried) labels.push(`retried (${s.attempts} attempts)`);
  if (s.compensated) labels.push('compensated');
  return labels.join(', ');
}

async function flow(id) {
  const f = await api(`/flows/${encodeURIComponent(id)}`);
  const actions = [];
  if (f.status === 'failed')
    actions.push(
      h('button', {
        type: 'button',
        text: 'Retry from the failed step',
        onclick: () =>
          act(`Retry flow ${id} from its failed step?`, `/flows/${encodeURIComponent(id)}/retry`, {}, () => 'Retried.'),
      }),
    );
  if (f.status === 'pending' || f.status === 'waiting')
    actions.push(
      h('button', {
        type: 'button',
        class: 'danger',
        text: 'Cancel',
        onclick: () =>
          act(
            `Cancel flow ${id}? Its completed steps are not compensated.`,
            `/flows/${encodeURIComponent(id)}/cancel`,
            {},
            () => 'Cancelled.',
          ),
      }),
    );
  return [
    h('h2', { text: `Flow ${id}` }),
    h('p', { text: `${f.name}: ${f.status}, ${f.runs} runs, started ${when(f.createdAt)}` }),
    actions,
    f.error ? h('p', { class: 'bad', text: `${f.error.code ?? f.error.name}: ${f.error.message}` }) : null,
    h('h3', { text: 'Steps' }),
    h(
      'ol',
      { class: 'timeline', 'data-testid': 'steps' },
      f.steps.length === 0 ? h('li', { text: 'no step yet' }) : null,
      f.steps.map((s) =>
        h(
          'li',
          { class: s.status },
          h('strong', { text: s.stepId }),
          ` ${stepLabel(s)}, ${when(s.startedAt)} to ${when(s.completedAt)}`,
          s.error ? h('pre', { text: json(s.error) }) : null,
        ),
      ),
    ),
    table(
      'Signals and approvals',
      ['Signal', 'Name', 'Payload (who)', 'Received'],
      f.signals.map((s) => row(s.signalId, s.name, json(s.payload), when(s.receivedAt))),
      'signals',
    ),
    h('h3', { text: 'Input and result' }),
    fields({ input: f.input, result: f.result }),
  ];
}

/** The agent page's parameters with the reservations' cursor as `reservations` (the approvals keep theirs). */
function nextReservations(params, cursor) {
  const next = new URLSearchParams(params);
  next.set('reservations', cursor);
  return next;
}

async function agent(params) {
  const held = new URLSearchParams();
  if (params.get('account')) held.set('account', params.get('account'));
  if (params.get('reservations')) held.set('cursor', params.get('reservations'));
  const [approvals, credits, reservations] = await Promise.all([
    api(`/approvals${query(params, ['status']) || '?status=pending'}`),
    api('/credits'),
    api(`/credits/reservations${String(held) ? `?${held}` : ''}`),
  ]);
  const rows = approvals.approvals.map((a) => {
    const decide = [];
    if (a.status === 'pending') {
      decide.push(
        h('button', {
          type: 'button',
          text: `Approve ${a.id}`,
          onclick: () =>
            act(
              `Approve ${a.tool} ${a.idempotencyKey}? The tool sends exactly this content on its next call.`,
              `/approvals/${encodeURIComponent(a.id)}/approve`,
              {},
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
              `/approvals/${encodeURIComponent(a.id)}/reject`,
              {},
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
      params.get('account')
        ? `Open credit reservations of ${params.get('account')}, newest first`
        : 'Open credit reservations, newest first',
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

const PAGES = { overview, records, events, flows, agent };

/** Draws the page the hash names (`#records?state=unknown`, `#record/<ref>`, `#flow/<id>`). */
async function route() {
  clearInterval(poll);
  const [path, search] = (location.hash.slice(1) || 'overview').split('?');
  const params = new URLSearchParams(search ?? '');
  const [page, ...rest] = path.split('/');
  const id = decodeURIComponent(rest.join('/'));
  const draw =
    page === 'record' ? () => record(id) : page === 'flow' ? () => flow(id) : () => (PAGES[page] ?? overview)(params);
  const nav = page === 'record' ? 'records' : page === 'flow' ? 'flows' : PAGES[page] ? page : 'overview';
  for (const a of document.querySelectorAll('nav a'))
    a.toggleAttribute('aria-current', a.getAttribute('href') === `#${nav}`);
  try {
    const content = await draw();
    login.hidden = true;
    forget.hidden = !sessionStorage.getItem('oncely.token');
    main.replaceChildren(...[content].flat(2).filter(Boolean));
    main.dataset.page = page;
  } catch (error) {
    if (!(error instanceof Denied)) {
      main.replaceChildren(h('h2', { text: 'Could not load' }), h('p', { role: 'alert', text: error.message }));
    }
    return;
  }
  // The overview refreshes itself; lists keep still while a person reads or filters them.
  if (nav === 'overview')
    poll = setInterval(async () => {
      try {
        main.replaceChildren(...(await overview()).flat(2).filter(Boolean));
        main.dataset.updated = String(Date.now());
      } catch {
        clearInterval(poll);
      }
    }, POLL_MS);
}

window.addEventListener('hashchange', () => {
  // What the last action said belongs to the page it was taken on.
  say('');
  route().then(() => main.focus());
});
route();
