/** The parts the pages are made of: tables, definition lists, the filter form and the next-page link. */
import { type Child, h } from './dom.js';
import { json, when } from './format.js';

/** A table with a caption, its header row, and `none` when it has no row. */
export function table(caption: string, columns: string[], rows: HTMLTableRowElement[], testid: string) {
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

/** A row of cells: nodes as they are, text as text, `-` for nothing. */
export const row = (...cells: (Node | string | null | undefined)[]) =>
  h(
    'tr',
    {},
    cells.map((c) => (c instanceof Node ? h('td', {}, c) : h('td', { text: c ?? '-' }))),
  );

/** Counts by name as a card (`data-count` names each for the tests). */
export function counts(title: string, values: Record<string, number>, prefix: string) {
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

/** Every field of an object as a definition list; objects as JSON, times as dates. */
export function fields(object: Record<string, unknown>) {
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

/** A filter of a list: its name, its label, and the values a select offers (a text field without). */
export type Filter = [name: string, label: string, options?: readonly string[]];

/** A filter form that redraws the page with the chosen filters in the hash. */
export function filters(page: string, params: URLSearchParams, fields: Filter[]) {
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

/** The search string of the named parameters that are set: `?a=1&b=2`, or ''. */
export function query(params: URLSearchParams, names: string[]): string {
  const out = new URLSearchParams();
  for (const n of names) {
    const value = params.get(n);
    if (value) out.set(n, value);
  }
  const text = out.toString();
  return text ? `?${text}` : '';
}

/** The link to a list's next page, when there is one. */
export function more(page: string, params: URLSearchParams, cursor: string | null): Child {
  if (!cursor) return null;
  const next = new URLSearchParams(params);
  next.set('cursor', cursor);
  return h('p', {}, h('a', { href: `#${page}?${next}`, text: 'Next page' }));
}
