/** The overview: the four rates with their targets and charts, counts by state, and the audit's last actions. */
import type { Rates, RateTotals } from '../../core/metrics.js';
import { read, type SampleJson } from './api.js';
import { type Child, h } from './dom.js';
import { percent, when } from './format.js';
import { counts, row, table } from './widgets.js';

const svgNs = 'http://www.w3.org/2000/svg';

/** A line of the rate's value at each sample: the chart of one window. */
function sparkline(samples: SampleJson[], name: keyof Rates, label: string): SVGSVGElement {
  const w = 160;
  const ht = 36;
  const svg = document.createElementNS(svgNs, 'svg');
  svg.setAttribute('viewBox', `0 0 ${w} ${ht}`);
  svg.setAttribute('role', 'img');
  const points = samples.flatMap((s) => {
    const v = s.rates[name];
    return v === null ? [] : [[s.at, v] as const];
  });
  const title = document.createElementNS(svgNs, 'title');
  title.textContent = `${label}: ${points.length} samples`;
  svg.append(title);
  const first = points[0];
  const last = points[points.length - 1];
  if (!first || !last) return svg;
  const span = Math.max(1, last[0] - first[0]);
  const y = (v: number) => ht - 2 - v * (ht - 4);
  const xy = points.map(([at, v]) => `${((at - first[0]) / span) * (w - 4) + 2},${y(v)}`);
  const line = document.createElementNS(svgNs, 'polyline');
  line.setAttribute('points', points.length === 1 ? `2,${y(first[1])} ${w - 2},${y(first[1])}` : xy.join(' '));
  line.setAttribute('fill', 'none');
  line.setAttribute('stroke', 'currentColor');
  line.setAttribute('stroke-width', '2');
  svg.append(line);
  return svg;
}

/** Duplicates answered without executing since the oldest sample of the last hour (the totals grow only). */
function stoppedLastHour(now: RateTotals, samples: SampleJson[]) {
  const oldest = samples[0];
  if (!oldest) return h('p', { text: 'duplicates stopped in the last hour: no sample yet' });
  const stopped = now.duplicatesIntercepted - oldest.rateTotals.duplicatesIntercepted;
  const passed = now.duplicates - oldest.rateTotals.duplicates - stopped;
  return h('p', {
    'data-testid': 'stopped',
    text: `${stopped} duplicates stopped in the last hour, ${passed} let through`,
  });
}

const RATES: [keyof Rates, string][] = [
  ['duplicateInterception', 'Duplicate interception'],
  ['keyHit', 'Key hit'],
  ['staleDrop', 'Stale drop'],
  ['compensationSuccess', 'Compensation success'],
];

/** The overview page (redrawn every few seconds by app.ts). */
export async function overview(): Promise<Child[]> {
  const [stats, counted, hour, day, audit] = await Promise.all([
    read.stats(),
    read.overview(),
    read.series('1h'),
    read.series('24h'),
    read.audit(10),
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
