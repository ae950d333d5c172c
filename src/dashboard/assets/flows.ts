/** The flows: the filtered list, and one flow's timeline with its retry and cancel. */
import { type Act, change, read, type ShownFlow } from './api.js';
import { type Child, h } from './dom.js';
import { json, when } from './format.js';
import { fields, filters, more, query, row, table } from './widgets.js';

/** A stored error's message (a list's flow error is the stored JSON, of no declared shape). */
const messageIn = (error: unknown) =>
  typeof error === 'object' && error !== null && 'message' in error ? String(error.message) : undefined;

/** The flows page: newest first, filtered by the hash's parameters. */
export async function flows(params: URLSearchParams): Promise<Child[]> {
  const page = await read.flows(query(params, ['status', 'cursor']));
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
          messageIn(f.error),
          when(f.updatedAt),
        ),
      ),
      'flows',
    ),
    more('flows', params, page.cursor),
  ];
}

// The labels the admin API derives from the stored rows (src/ops/admin-timeline.ts).
function stepLabel(s: ShownFlow['steps'][number]): string {
  const labels = [s.compensation ? `compensation ${s.status}` : s.status];
  if (s.memoized) labels.push(`memoized (stored by run ${s.run}, not run again)`);
  else if (s.memoized === false && s.status === 'completed') labels.push(`executed in run ${s.run}`);
  if (s.retried) labels.push(`retried (${s.attempts} attempts)`);
  if (s.compensated) labels.push('compensated');
  return labels.join(', ');
}

/** One flow's page: its steps as a timeline, its signals, input and result, and what may be done to it. */
export async function flow(id: string, act: Act): Promise<Child[]> {
  const f = await read.flow(id);
  const actions: Child[] = [];
  if (f.status === 'failed')
    actions.push(
      h('button', {
        type: 'button',
        text: 'Retry from the failed step',
        onclick: () =>
          act(
            `Retry flow ${id} from its failed step?`,
            () => change.retryFlow(id),
            () => 'Retried.',
          ),
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
            () => change.cancelFlow(id),
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
