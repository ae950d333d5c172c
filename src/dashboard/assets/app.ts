// Checked against the browser's types whatever tsconfig.json's `lib` says (its default holds them).
/// <reference lib="dom" />
/// <reference lib="dom.iterable" />
/**
 * The oncely dashboard, the module index.html loads: plain DOM, no framework, compiled by tsc to
 * the ES modules the browser loads beside this one. Every value from the admin API is set as text
 * (never as HTML). This module draws the page the hash names, asks for the token when the API
 * refuses it, and takes the changes the pages offer.
 */
import { agent } from './agent.js';
import { type Act, Denied, signedIn, signIn, signOut } from './api.js';
import { confirmed } from './confirm.js';
import { byId, type Child, flat, h, say } from './dom.js';
import { events } from './events.js';
import { flow, flows } from './flows.js';
import { messageOf } from './format.js';
import { overview } from './overview.js';
import { record, records } from './records.js';

const main = byId('main', HTMLElement);
const login = byId('login', HTMLFormElement);
const forget = byId('forget', HTMLButtonElement);
const token = byId('token', HTMLInputElement);
const operator = byId('operator', HTMLInputElement);
const POLL_MS = 5000;
let poll: number | undefined;

function showLogin(message: string): void {
  window.clearInterval(poll);
  main.replaceChildren();
  login.hidden = false;
  forget.hidden = true;
  byId('login-error', HTMLElement).textContent = signedIn() ? `Refused: ${message}` : message;
  token.focus();
}

login.addEventListener('submit', (event) => {
  event.preventDefault();
  signIn(token.value.trim(), operator.value.trim());
  token.value = '';
  void route();
});
forget.addEventListener('click', () => {
  signOut();
  showLogin('The token is forgotten.');
});

/** Runs a change after its confirmation, redraws the page, then says how it went (so what it says matches what is shown). */
const act: Act = async (question, make, done) => {
  if (!(await confirmed(question))) return say('Cancelled: nothing changed.');
  let data: Awaited<ReturnType<typeof make>>;
  try {
    data = await make();
  } catch (error) {
    if (error instanceof Denied) showLogin(error.message);
    else say(`Refused: ${messageOf(error)}`);
    return;
  }
  await route();
  say(done(data));
};

/** A page drawn from the hash's parameters. */
type Draw = (params: URLSearchParams, act: Act) => Promise<Child[]>;
const PAGES = new Map<string, Draw>([
  ['overview', overview],
  ['records', records],
  ['events', events],
  ['flows', flows],
  ['agent', agent],
]);

/** Draws the page the hash names (`#records?state=unknown`, `#record/<ref>`, `#flow/<id>`). */
async function route(): Promise<void> {
  window.clearInterval(poll);
  const [path = '', search = ''] = (location.hash.slice(1) || 'overview').split('?');
  const params = new URLSearchParams(search);
  const [page = '', ...rest] = path.split('/');
  const id = decodeURIComponent(rest.join('/'));
  const listed = PAGES.get(page);
  const draw =
    page === 'record'
      ? () => record(id, act)
      : page === 'flow'
        ? () => flow(id, act)
        : () => (listed ?? overview)(params, act);
  const nav = page === 'record' ? 'records' : page === 'flow' ? 'flows' : listed ? page : 'overview';
  for (const a of document.querySelectorAll('nav a'))
    a.toggleAttribute('aria-current', a.getAttribute('href') === `#${nav}`);
  try {
    const content = await draw();
    login.hidden = true;
    forget.hidden = !signedIn();
    main.replaceChildren(...flat(content));
    main.dataset.page = page;
  } catch (error) {
    if (error instanceof Denied) showLogin(error.message);
    else main.replaceChildren(h('h2', { text: 'Could not load' }), h('p', { role: 'alert', text: messageOf(error) }));
    return;
  }
  // The overview refreshes itself; lists keep still while a person reads or filters them.
  if (nav === 'overview')
    poll = window.setInterval(async () => {
      try {
        main.replaceChildren(...flat(await overview()));
        main.dataset.updated = String(Date.now());
      } catch (error) {
        window.clearInterval(poll);
        if (error instanceof Denied) showLogin(error.message);
      }
    }, POLL_MS);
}

window.addEventListener('hashchange', () => {
  // What the last action said belongs to the page it was taken on.
  say('');
  void route().then(() => main.focus());
});
void route();
