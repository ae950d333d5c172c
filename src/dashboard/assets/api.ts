/**
 * The admin API as the page calls it: one function per route, each answering the data of its
 * envelope in the shape the server's own types give it (imported as types only, so nothing of the
 * server reaches the browser, and a change of a shape fails this page's type check). The token
 * lives in sessionStorage (this tab only) and goes out as a bearer header: no cookie, so another
 * site's page cannot act with it.
 */
import type { Rates } from '../../core/metrics.js';
import type { PublicRecord } from '../../core/record.js';
import type { EventQueue } from '../../host/events.js';
import type { HostStats } from '../../host/stats.js';
import type { AdminAction } from '../../ops/admin-audit.js';
import type {
  ApprovalSummary,
  CreditBalance,
  listDeadLetters,
  listEvents,
  listFlowRuns,
  OpenReservation,
} from '../../ops/admin-lists.js';
import type { withTimeline } from '../../ops/admin-timeline.js';
import type { Overview } from '../../ops/overview.js';
import type { StoredResult } from '../../ops/record-result.js';
import type { Sample, SERIES_WINDOWS } from '../../ops/series.js';

/** The API's base path, written into the page by the shell. */
const API = document.body.dataset.api ?? '';
const TOKEN = 'oncely.token';
const OPERATOR = 'oncely.operator';

/** The API refused the token (401) or the caller (403): the page asks for a token again. */
export class Denied extends Error {}

/** Keeps the token, and the name the audit records, for this tab. */
export function signIn(token: string, operator: string): void {
  sessionStorage.setItem(TOKEN, token);
  if (operator) sessionStorage.setItem(OPERATOR, operator);
  else sessionStorage.removeItem(OPERATOR);
}

/** Forgets the token and the name. */
export function signOut(): void {
  sessionStorage.removeItem(TOKEN);
  sessionStorage.removeItem(OPERATOR);
}

/** Whether this tab holds a token. */
export const signedIn = (): boolean => Boolean(sessionStorage.getItem(TOKEN));

/** One admin API call: the data of its envelope, or an Error with the API's message. */
async function call<T>(path: string, body?: object): Promise<T> {
  const headers: Record<string, string> = {};
  const token = sessionStorage.getItem(TOKEN);
  const operator = sessionStorage.getItem(OPERATOR);
  if (token) headers.authorization = `Bearer ${token}`;
  if (operator) headers['x-oncely-operator'] = operator;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(API + path, {
    method: body === undefined ? 'GET' : 'POST',
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const answer: { data?: unknown; error?: { code?: string; message?: string } } = await res
    .json()
    // A proxy's error page is not the API's JSON: the status alone says what happened.
    .catch(() => ({ error: { message: `HTTP ${res.status}, not a JSON answer` } }));
  if (res.status === 401 || res.status === 403) throw new Denied(answer.error?.message ?? `HTTP ${res.status}`);
  const { code, message } = answer.error ?? {};
  if (!res.ok) throw new Error(code ? `${code}: ${message}` : (message ?? `HTTP ${res.status}`));
  if (!('data' in answer)) throw new Error(`HTTP ${res.status}, not a JSON answer`);
  // The one unchecked step: the server answers the shape its route's types say.
  return answer.data as T;
}

/** JSON has no NaN: a rate with nothing counted yet is answered as null. */
type RatesJson = { [K in keyof Rates]: number | null };
/** GET /stats. */
export type Stats = Omit<HostStats, 'rates'> & {
  rates: { [K in keyof Rates]: Omit<HostStats['rates'][K], 'value'> & { value: number | null } };
};
/** One sample of GET /series. */
export type SampleJson = Omit<Sample, 'rates'> & { rates: RatesJson };
/** A page of a list route: its items under the route's name, and the next page's cursor. */
type Listed<Name extends string, Item> = { [K in Name]: Item[] } & { cursor: string | null };
/** The items of a list function of the server. */
type ItemOf<F extends (...args: never[]) => Promise<{ items: unknown[] }>> = Awaited<ReturnType<F>>['items'][number];
/** A record as GET /records lists it. */
export type ListedRecord = PublicRecord & { ref: string };
/** A record as GET /records/:ref shows it, with its stored outcome. */
export type ShownRecord = ListedRecord & { result: StoredResult };
/** A dead letter as GET /events/dead lists it. */
export type DeadLetter = ItemOf<typeof listDeadLetters>;
/** A flow as GET /flows/:id shows it, its steps labelled for the timeline. */
export type ShownFlow = Awaited<ReturnType<typeof withTimeline>>;
/** How a person settles an unknown record (POST /records/:ref/resolve). */
export type Settle = ({ value: unknown } | { error: { message: string; code?: string } } | { retry: true }) & {
  note?: string;
};

const path = encodeURIComponent;

/** The routes the page reads. `query` is a search string (`?state=unknown`) or ''. */
export const read = {
  stats: () => call<Stats>('/stats'),
  overview: () => call<Overview>('/overview'),
  series: (window: keyof typeof SERIES_WINDOWS) =>
    call<{ window: string; everyMs: number; samples: SampleJson[] }>(`/series?window=${window}`),
  audit: (limit: number) => call<Listed<'actions', AdminAction>>(`/audit?limit=${limit}`),
  records: (query: string) => call<Listed<'records', ListedRecord>>(`/records${query}`),
  record: (ref: string) => call<ShownRecord>(`/records/${path(ref)}`),
  events: (query: string) => call<Listed<'events', ItemOf<typeof listEvents>>>(`/events${query}`),
  deadLetters: (query: string) => call<Listed<'deadLetters', DeadLetter>>(`/events/dead${query}`),
  flows: (query: string) => call<Listed<'flows', ItemOf<typeof listFlowRuns>>>(`/flows${query}`),
  flow: (id: string) => call<ShownFlow>(`/flows/${path(id)}`),
  approvals: (query: string) => call<Listed<'approvals', ApprovalSummary>>(`/approvals${query}`),
  credits: () => call<Listed<'accounts', CreditBalance>>('/credits'),
  reservations: (query: string) => call<Listed<'reservations', OpenReservation>>(`/credits/reservations${query}`),
};

/** The changes the page makes; each is audited by the API. */
export const change = {
  settle: (ref: string, body: Settle) => call<ListedRecord>(`/records/${path(ref)}/resolve`, body),
  replay: (body: { source: string; id: string } | { all: true }) =>
    call<{ replayed: Awaited<ReturnType<EventQueue['replay']>> }>('/events/dead/replay', body),
  retryFlow: (id: string) => call<unknown>(`/flows/${path(id)}/retry`, {}),
  cancelFlow: (id: string) => call<unknown>(`/flows/${path(id)}/cancel`, {}),
  approve: (id: string) => call<unknown>(`/approvals/${path(id)}/approve`, {}),
  reject: (id: string) => call<unknown>(`/approvals/${path(id)}/reject`, {}),
};

/**
 * How a page takes a change (app.ts's act): asked first, then made, the page redrawn, and `done`
 * of its answer said.
 */
export type Act = <T>(question: string, make: () => Promise<T>, done: (data: T) => string) => Promise<void>;
