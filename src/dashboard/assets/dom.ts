/**
 * The page's few DOM helpers: `h` builds elements (every value set as text or an attribute, never
 * parsed as HTML), `byId` finds the elements index.html holds, `say` writes the status line.
 */

/** What `h` appends: nodes and text; null and undefined are left out, arrays flattened. */
export type Child = Node | string | null | undefined | Child[];

/** Attributes (false, null and undefined leave one out; true sets it empty), `text`, and `on*` listeners. */
export type Attrs = Record<string, string | number | boolean | null | undefined | ((event: Event) => unknown)>;

/** An element with attributes (`on*` functions become listeners) and children (strings become text). */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (typeof value === 'function') node.addEventListener(name.slice(2), value);
    else if (name === 'text') node.textContent = String(value);
    else node.setAttribute(name, value === true ? '' : String(value));
  }
  node.append(...flat(children));
  return node;
}

/** Children as `append` takes them. */
export function flat(children: Child[]): (Node | string)[] {
  return children.flatMap((child) =>
    Array.isArray(child) ? flat(child) : child === null || child === undefined ? [] : [child],
  );
}

/** The element of index.html with this id, checked to be of its kind (a missing one is a bug of the page). */
export function byId<T extends HTMLElement>(id: string, kind: { new (): T; name: string }): T {
  const node = document.getElementById(id);
  if (!(node instanceof kind)) throw new Error(`index.html has no ${kind.name} #${id}`);
  return node;
}

const status = byId('status', HTMLElement);

/** Writes the status line (a live region: screen readers say it). */
export function say(text: string): void {
  status.textContent = text;
}
