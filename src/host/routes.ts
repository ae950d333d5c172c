import type { App } from './app.js';
import { type SourceConfig, signBodyHmac, signStandardWebhook, signStripeWebhook } from './webhooks.js';

/** One handler route of an app, with a curl line that invokes it once (and replays when repeated). */
export interface HandlerRoute {
  id: string;
  url: string;
  keyFields: readonly string[];
  curl: string;
}

/** One webhook route of an app and how a sender signs for it. */
export interface WebhookRoute {
  source: string;
  kind: SourceConfig['kind'];
  url: string;
  signing: string;
}

/** What an app serves, as `GET /` answers it and `oncely serve` prints it. */
export interface RouteIndex {
  handlers: HandlerRoute[];
  webhooks: WebhookRoute[];
  health: string;
  eventStats: string;
  /** The totals and the four rates with their targets, over every process of the database. */
  stats: string;
  /** This process's metrics in the Prometheus text format. */
  metrics: string;
  /** The CLI commands that read and replay dead letters (they are not served over HTTP). */
  deadLetters: string;
  /** Broker sources and targets as `<name> (<kind>)`, and where their states are served. */
  brokers: { sources: string[]; targets: string[]; status: string };
}

/** The routes of `app` served at `base` (e.g. `http://localhost:3000`); `dir` is how the CLI names the app folder. */
export function routeIndex(app: App, base: string, dir = app.dir): RouteIndex {
  const handlers = [...app.handlers].map(([id, handler]) => {
    const keyFields = handler.idempotency?.keyFields ?? [];
    const url = `${base}/v1/invoke/${id}`;
    const body = JSON.stringify(handler.example ?? Object.fromEntries(keyFields.map((f) => [f, `<${f}>`])));
    const curl = `curl -s -X POST ${url} -H 'Content-Type: application/json' -H 'Idempotency-Key: ${id}-1' -d ${shellQuote(body)}`;
    return { id, url, keyFields, curl };
  });
  const webhooks = Object.entries(app.config.sources ?? {}).map(([source, config]) => ({
    source,
    kind: config.kind,
    url: `${base}/v1/webhooks/${source}`,
    signing: `${signingOf(config)}; a signed curl line: npx oncely sign ${source} '<json body>' --dir ${dir}`,
  }));
  return {
    handlers,
    webhooks,
    health: `${base}/v1/health`,
    eventStats: `${base}/v1/events/stats`,
    stats: `${base}/v1/stats`,
    metrics: `${base}/metrics`,
    deadLetters: `npx oncely events dead list ${dir}; npx oncely events dead replay --all --dir ${dir}`,
    brokers: {
      sources: Object.entries(app.config.brokers ?? {}).map(([name, c]) => `${name} (${c.kind})`),
      targets: Object.entries(app.config.targets ?? {}).map(([name, c]) => `${name} (${c.kind})`),
      status: `${base}/v1/brokers`,
    },
  };
}

/** How a request of this source is signed, in one sentence. */
function signingOf(source: SourceConfig): string {
  if ('unsigned' in source && source.unsigned) return 'unsigned: anyone who reaches the URL can post events';
  switch (source.kind) {
    case 'standard-webhooks':
      return 'Standard Webhooks: webhook-id, webhook-timestamp, webhook-signature (v1,<base64 HMAC-SHA256 of id.timestamp.body>)';
    case 'id-header':
      return `event id in ${source.idHeader}, ${source.hmacHeader ?? 'X-Hub-Signature-256'}: sha256=<hex HMAC-SHA256 of the body>`;
    case 'id-field':
      return `event id in body field "${source.idField}", Stripe-Signature: t=<seconds>,v1=<hex HMAC-SHA256 of t.body>`;
  }
}

/** The headers a sender of `source` sends with `body`, signed with the source's first secret. */
export function signedHeaders(
  source: SourceConfig,
  id: string,
  body: string,
  now: number = Date.now(),
): Record<string, string> {
  const secret = firstSecret(source);
  const timestamp = Math.floor(now / 1000);
  switch (source.kind) {
    case 'standard-webhooks':
      return {
        'webhook-id': id,
        'webhook-timestamp': String(timestamp),
        'webhook-signature': signStandardWebhook(secret ?? '', id, timestamp, body),
      };
    case 'id-header':
      return {
        [source.idHeader]: id,
        ...(secret === undefined ? {} : { [source.hmacHeader ?? 'X-Hub-Signature-256']: signBodyHmac(secret, body) }),
      };
    case 'id-field':
      return secret === undefined ? {} : { 'Stripe-Signature': signStripeWebhook(secret, timestamp, body) };
  }
}

function firstSecret(source: SourceConfig): string | undefined {
  const secret = 'secret' in source ? source.secret : undefined;
  return typeof secret === 'string' ? secret : secret?.[0];
}

/** Single-quotes a value for a POSIX shell. */
export function shellQuote(value: string): string {
  return `'${value.replaceAll("'", `'\\''`)}'`;
}
