import { createHmac, timingSafeEqual } from 'node:crypto';
import { ERRORS, type ErrorCode, OncelyError } from '../core/errors.js';
import { validateEventType, validateKey } from '../core/key.js';

/**
 * How one source sends its events: where the event id and type are, and how requests are signed.
 * Every source is verified, or says `unsigned: true`: a missing secret never means "accept anything".
 * @example
 * const github: SourceConfig = { kind: 'id-header', idHeader: 'X-GitHub-Delivery', typeHeader: 'X-GitHub-Event', secret: env('GITHUB_SECRET') };
 * const stripe: SourceConfig = { kind: 'id-field', idField: 'id', typeField: 'type', verify: 'stripe', secret: env('STRIPE_WEBHOOK_SECRET') };
 */
export type SourceConfig =
  | {
      /** Standard Webhooks (standardwebhooks.com): `webhook-id`, `webhook-timestamp`, `webhook-signature`. */
      kind: 'standard-webhooks';
      /** `whsec_<base64 key>` (a key of at least 16 bytes); several while a secret is rotated. */
      secret: string | readonly string[];
      /** How far `webhook-timestamp` may be from now, either way; default 300. */
      toleranceSeconds?: number;
      /** Top-level body field holding the event type; default `type`. */
      typeField?: string;
    }
  | ({
      /** The event id is a header (GitHub's `X-GitHub-Delivery`); requests carry an HMAC-SHA256 of the body. */
      kind: 'id-header';
      idHeader: string;
      /** Header holding the type (GitHub's `X-GitHub-Event`); else `typeField` of the body. */
      typeHeader?: string;
      typeField?: string;
      /** Header holding `sha256=<hex>`; default `X-Hub-Signature-256`. */
      hmacHeader?: string;
    } & (
      | {
          /** The HMAC key (at least 16 characters); several while it is rotated. */
          secret: string | readonly string[];
          unsigned?: never;
        }
      | {
          /** Accepts requests nobody signed: anyone who reaches the route can post events. */
          unsigned: true;
          secret?: never;
        }
    ))
  | ({
      /** The event id and type are top-level body fields (Stripe's event `id` and `type`). */
      kind: 'id-field';
      idField: string;
      typeField: string;
    } & (
      | {
          /** Stripe's `Stripe-Signature`: `t=<unix>,v1=<hex>`, an HMAC-SHA256 of `${t}.${body}`. */
          verify: 'stripe';
          /** The endpoint's signing secret, `whsec_...`; several while it is rolled. */
          secret: string | readonly string[];
          /** How far `t` may be from now, either way; default 300. */
          toleranceSeconds?: number;
          unsigned?: never;
        }
      | {
          /** Accepts requests nobody signed: anyone who reaches the route can post events. */
          unsigned: true;
          verify?: never;
          secret?: never;
        }
    ));

/** A request read as an event, or why it was refused (401: not authentic, 400: not readable). */
export type ReadResult =
  | { ok: true; id: string; type: string; data: unknown }
  | { ok: false; status: 400 | 401; code: ErrorCode; message: string };

/** Default tolerance of signed timestamps (Standard Webhooks, Stripe), in seconds. */
export const DEFAULT_TOLERANCE_SECONDS = 300;

/**
 * The shortest HMAC key accepted, in bytes (characters for GitHub and Stripe secrets): 128 bits.
 * Standard Webhooks senders generate 24 to 64 bytes; under 16 is a typo or a toy, not a secret.
 */
export const MIN_KEY_BYTES = 16;

/** Source names the webhook route may not use: the outbox delivers its messages as source `outbox`. */
export const RESERVED_SOURCES: readonly string[] = ['outbox'];

// A plain token, as consumer folders are named (`consumers/<source>/<type>.ts`).
const SOURCE_NAME = /^[a-z0-9][a-z0-9._-]{0,63}$/i;

type Refusal = Extract<ReadResult, { ok: false }>;

/** Codes a webhook read refuses with: 400 (not readable) and 401 (not authentic) in the catalogue. */
type ReadRefusalCode = {
  [C in ErrorCode]: (typeof ERRORS)[C]['status'] extends 400 | 401 ? C : never;
}[ErrorCode];

const refuse = (code: ReadRefusalCode, message: string): Refusal => ({
  ok: false,
  status: ERRORS[code].status,
  code,
  message,
});

/**
 * Checks every webhook source of an app before it serves: names are plain tokens and not reserved,
 * each source is verified (with a usable secret and tolerance) or says `unsigned: true`. Throws
 * CONFIG_INVALID naming the source and field; warns once per unsigned source.
 * @example validateSources(app.config); // at host creation, before any request
 */
export function validateSources(
  config: { sources?: Record<string, SourceConfig> },
  warn: (message: string) => void = console.warn,
): void {
  const sources: unknown = config.sources;
  if (sources === undefined) return;
  if (typeof sources !== 'object' || sources === null || Array.isArray(sources))
    throw new OncelyError('CONFIG_INVALID', 'config.sources must be an object of webhook sources by name');
  for (const [name, source] of Object.entries(sources as Record<string, unknown>)) {
    const fail = (field: string, problem: string): never => {
      throw new OncelyError('CONFIG_INVALID', `webhook source "${name}": ${field} ${problem}`);
    };
    if (!SOURCE_NAME.test(name))
      fail(
        'name',
        'must be a plain token: letters, digits, ".", "_" or "-", at most 64, starting with a letter or digit',
      );
    if (RESERVED_SOURCES.includes(name.toLowerCase()))
      fail('name', `is reserved: the outbox delivers its messages as source "${name.toLowerCase()}"`);
    if (typeof source !== 'object' || source === null) fail('config', 'must be an object');
    const s = source as Record<string, unknown>;
    const text = (field: string, required: boolean) => {
      if (s[field] === undefined && !required) return;
      if (typeof s[field] !== 'string' || s[field] === '') fail(field, 'must be a non-empty string');
    };
    const tolerance = () => {
      const t = s.toleranceSeconds;
      if (t !== undefined && (typeof t !== 'number' || !Number.isFinite(t) || t <= 0))
        fail('toleranceSeconds', `must be a positive number of seconds, not ${String(t)}`);
    };
    const secretList = (check: (secret: string) => string | undefined) => {
      const list = typeof s.secret === 'string' ? [s.secret] : s.secret;
      if (!Array.isArray(list) || list.length === 0)
        fail(
          'secret',
          'is missing (is its environment variable set?); or say unsigned: true to accept unsigned events',
        );
      for (const [i, secret] of (list as unknown[]).entries()) {
        const field = typeof s.secret === 'string' ? 'secret' : `secret[${i}]`;
        if (typeof secret !== 'string' || secret === '') fail(field, 'is empty (is its environment variable set?)');
        const problem = check(secret as string);
        if (problem) fail(field, problem);
      }
    };
    const characters = (secret: string) =>
      secret.length < MIN_KEY_BYTES ? `has ${secret.length} characters, fewer than ${MIN_KEY_BYTES}` : undefined;
    const unsigned = () => {
      if (s.unsigned === undefined) return false;
      if (s.unsigned !== true) fail('unsigned', 'must be true or left out');
      if (s.secret !== undefined || s.verify !== undefined) fail('unsigned', 'cannot be combined with a secret');
      return true;
    };
    switch (s.kind) {
      case 'standard-webhooks':
        if (s.unsigned !== undefined) fail('unsigned', 'does not apply: Standard Webhooks are always signed');
        secretList(standardSecretProblem);
        tolerance();
        text('typeField', false);
        break;
      case 'id-header':
        text('idHeader', true);
        text('typeHeader', false);
        text('typeField', false);
        text('hmacHeader', false);
        if (!unsigned()) secretList(characters);
        break;
      case 'id-field':
        text('idField', true);
        text('typeField', true);
        if (unsigned()) break;
        if (s.verify !== 'stripe') fail('verify', "must be 'stripe' (with its secret), or say unsigned: true");
        secretList((secret) =>
          secret.startsWith('whsec_') ? characters(secret.slice(6)) : 'is not a Stripe endpoint secret (whsec_...)',
        );
        tolerance();
        break;
      default:
        fail('kind', "must be 'standard-webhooks', 'id-header' or 'id-field'");
    }
    if (s.unsigned === true)
      warn(
        `oncely: webhook source "${name}" is unsigned: anyone who can reach /v1/webhooks/${name} can post its events`,
      );
  }
}

/**
 * Reads and verifies one webhook request. Nothing is stored here: a refusal means the caller
 * answers with `status` and stores nothing. `data` is the whole parsed JSON body.
 * @example
 * const r = readWebhook({ kind: 'standard-webhooks', secret: 'whsec_...' }, req.headers, rawBody);
 * if (!r.ok) return res.status(r.status).json({ code: r.code, error: r }); // else queue.intake(source, r.id, r.type, r.data)
 */
export function readWebhook(
  source: SourceConfig,
  headers: Record<string, string | undefined>,
  rawBody: Buffer,
  now: number = Date.now(),
): ReadResult {
  const header = lowerCased(headers);
  switch (source.kind) {
    case 'standard-webhooks': {
      const refused = verifyStandardWebhook(source, header, rawBody, now);
      if (refused) return refused;
      return readEvent(
        rawBody,
        () => ({ id: header['webhook-id'], from: 'header webhook-id' }),
        (body) => typeFrom(body, source.typeField ?? 'type'),
      );
    }
    case 'id-header': {
      // Verified unless the source says unsigned: a secret missing from the config fails closed.
      if (source.unsigned !== true) {
        const name = (source.hmacHeader ?? 'X-Hub-Signature-256').toLowerCase();
        if (!verifyBodyHmac(secrets(source.secret), header[name], rawBody))
          return refuse('SIGNATURE_INVALID', `header ${name} is missing or does not match the body`);
      }
      const { typeHeader, typeField } = source;
      const idHeader = source.idHeader;
      return readEvent(
        rawBody,
        () => ({ id: header[idHeader.toLowerCase()], from: `header ${idHeader}` }),
        (body) => {
          if (typeHeader === undefined) return typeFrom(body, typeField ?? 'type');
          const type = header[typeHeader.toLowerCase()];
          return type ? type : refuse('EVENT_TYPE_MISSING', `header ${typeHeader} is missing`);
        },
      );
    }
    case 'id-field': {
      if (source.verify === 'stripe') {
        const refused = verifyStripe(source, header['stripe-signature'], rawBody, now);
        if (refused) return refused;
      } else if (source.unsigned !== true)
        return refuse('SIGNATURE_INVALID', "the source has no verification: set verify: 'stripe' or unsigned: true");
      return readEvent(
        rawBody,
        (body) => ({ id: body[source.idField], from: `body field "${source.idField}"` }),
        (body) => typeFrom(body, source.typeField),
      );
    }
  }
}

/**
 * Signs a body as a Standard Webhooks sender does: the value of the `webhook-signature` header.
 * @param timestamp seconds since the epoch, the value of `webhook-timestamp`
 * @example
 * const ts = Math.floor(Date.now() / 1000);
 * fetch(url, { method: 'POST', body, headers: { 'webhook-id': id, 'webhook-timestamp': String(ts), 'webhook-signature': signStandardWebhook(secret, id, ts, body) } });
 */
export function signStandardWebhook(
  secret: string,
  id: string,
  timestamp: number | string,
  body: string | Buffer,
): string {
  return `v1,${standardHmac(secretKey(secret), id, String(timestamp), body).toString('base64')}`;
}

/** Signs a body as GitHub does: the value of `X-Hub-Signature-256`. */
export function signBodyHmac(secret: string, body: string | Buffer): string {
  return `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
}

/**
 * Signs a body as Stripe does: the value of `Stripe-Signature`.
 * @param timestamp seconds since the epoch
 * @example
 * fetch(url, { method: 'POST', body, headers: { 'stripe-signature': signStripeWebhook(secret, Math.floor(Date.now() / 1000), body) } });
 */
export function signStripeWebhook(secret: string, timestamp: number | string, body: string | Buffer): string {
  return `t=${timestamp},v1=${stripeHmac(secret, String(timestamp), body).toString('hex')}`;
}

function verifyStandardWebhook(
  source: Extract<SourceConfig, { kind: 'standard-webhooks' }>,
  header: Record<string, string>,
  rawBody: Buffer,
  now: number,
): Refusal | undefined {
  const id = header['webhook-id'];
  const timestamp = header['webhook-timestamp'];
  const signature = header['webhook-signature'];
  if (!id || !timestamp || !signature)
    return refuse('SIGNATURE_INVALID', 'headers webhook-id, webhook-timestamp and webhook-signature are required');
  if (!/^\d{1,15}$/.test(timestamp))
    return refuse('SIGNATURE_INVALID', 'webhook-timestamp must be whole seconds since the epoch');
  const late = lateness(source.toleranceSeconds, timestamp, now, 'webhook-timestamp');
  if (late) return late;
  const given = signature
    .split(' ')
    .filter((s) => s.startsWith('v1,'))
    .map((s) => Buffer.from(s.slice(3), 'base64'));
  // An unusable key (empty after decoding, or short) verifies nothing, even if start-up checks were skipped.
  for (const secret of secrets(source.secret).filter((s) => standardSecretProblem(s) === undefined)) {
    const expected = standardHmac(secretKey(secret), id, timestamp, rawBody);
    if (given.some((g) => g.length === expected.length && timingSafeEqual(g, expected))) return undefined;
  }
  return refuse('SIGNATURE_INVALID', 'no v1 signature in webhook-signature matches a configured secret');
}

function verifyStripe(
  source: { secret: string | readonly string[]; toleranceSeconds?: number },
  signature: string | undefined,
  rawBody: Buffer,
  now: number,
): Refusal | undefined {
  if (!signature) return refuse('SIGNATURE_INVALID', 'header Stripe-Signature is required');
  const stamps: string[] = [];
  const given: Buffer[] = [];
  for (const item of signature.split(',')) {
    const at = item.indexOf('=');
    if (at < 0) continue;
    const [name, value] = [item.slice(0, at).trim(), item.slice(at + 1).trim()];
    if (name === 't') stamps.push(value);
    // Other schemes (v0 is Stripe's test-mode legacy) are ignored, as Stripe's libraries do.
    else if (name === 'v1' && /^[0-9a-fA-F]{64}$/.test(value)) given.push(Buffer.from(value, 'hex'));
  }
  const [timestamp] = stamps;
  if (stamps.length !== 1 || timestamp === undefined || !/^\d{1,15}$/.test(timestamp))
    return refuse('SIGNATURE_INVALID', 'Stripe-Signature must carry one t=<seconds since the epoch>');
  const late = lateness(source.toleranceSeconds, timestamp, now, 'Stripe-Signature t');
  if (late) return late;
  for (const secret of secrets(source.secret)) {
    const expected = stripeHmac(secret, timestamp, rawBody);
    if (given.some((g) => timingSafeEqual(g, expected))) return undefined;
  }
  return refuse('SIGNATURE_INVALID', 'no v1 signature in Stripe-Signature matches a configured secret');
}

/** A refusal when `timestamp` (seconds) is further from now than the tolerance, either way. */
function lateness(toleranceSeconds: number | undefined, timestamp: string, now: number, what: string) {
  const tolerance = toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS;
  // Both ways: an old timestamp is a replay, a future one would stay "fresh" for too long. Written
  // as "not within" so that a NaN tolerance refuses everything instead of disabling the window.
  if (!(Math.abs(now / 1000 - Number(timestamp)) <= tolerance))
    return refuse('TIMESTAMP_OUT_OF_TOLERANCE', `${what} is more than ${tolerance}s from now`);
  return undefined;
}

function verifyBodyHmac(keys: readonly string[], signature: string | undefined, rawBody: Buffer): boolean {
  if (!signature?.startsWith('sha256=')) return false;
  const hex = signature.slice(7);
  if (!/^[0-9a-fA-F]{64}$/.test(hex)) return false;
  const given = Buffer.from(hex, 'hex');
  return keys.some((key) => timingSafeEqual(given, createHmac('sha256', key).update(rawBody).digest()));
}

// Stripe uses the whole endpoint secret, `whsec_` included, as the UTF-8 key (it is not base64).
function stripeHmac(secret: string, timestamp: string, body: string | Buffer): Buffer {
  return createHmac('sha256', secret).update(`${timestamp}.`).update(body).digest();
}

function standardHmac(key: Buffer, id: string, timestamp: string, body: string | Buffer): Buffer {
  return createHmac('sha256', key).update(`${id}.${timestamp}.`).update(body).digest();
}

// As the reference libraries do: the `whsec_` prefix is optional, the rest is the base64 key.
function secretKey(secret: string): Buffer {
  return Buffer.from(secret.startsWith('whsec_') ? secret.slice(6) : secret, 'base64');
}

/**
 * Why a Standard Webhooks secret is unusable, or undefined. Node decodes any text as base64,
 * skipping what is not, so `whsec_` or a typo would give an empty or short key anyone can sign with.
 */
function standardSecretProblem(secret: string): string | undefined {
  const text = secret.startsWith('whsec_') ? secret.slice(6) : secret;
  const unpadded = text.replace(/=+$/, '');
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(text) || secretKey(secret).toString('base64').replace(/=+$/, '') !== unpadded)
    return 'is not whsec_ followed by base64';
  const bytes = secretKey(secret).length;
  return bytes < MIN_KEY_BYTES ? `decodes to ${bytes} bytes, fewer than ${MIN_KEY_BYTES}` : undefined;
}

// Fails closed: a secret missing from the environment verifies nothing, rather than everything.
function secrets(secret: string | readonly string[] | undefined): readonly string[] {
  return (typeof secret === 'string' ? [secret] : (secret ?? [])).filter((s) => typeof s === 'string' && s.length > 0);
}

function lowerCased(headers: Record<string, string | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) if (typeof value === 'string') out[name.toLowerCase()] = value;
  return out;
}

function typeFrom(body: Record<string, unknown>, field: string): string | Refusal {
  const type = body[field];
  return typeof type === 'string' && type.length > 0
    ? type
    : refuse('BODY_INVALID', `body field "${field}" must be a non-empty string (the event type)`);
}

/** Parses the body, then reads the id and the type; `from` names where the id was looked for. */
function readEvent(
  rawBody: Buffer,
  idOf: (body: Record<string, unknown>) => { id: unknown; from: string },
  typeOf: (body: Record<string, unknown>) => string | Refusal,
): ReadResult {
  let body: unknown;
  try {
    body = JSON.parse(rawBody.toString('utf8'));
  } catch {
    return refuse('BODY_INVALID', 'body is not JSON');
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    return refuse('BODY_INVALID', 'body must be a JSON object');
  const fields = body as Record<string, unknown>;
  const { id, from } = idOf(fields);
  if (id === undefined || id === null || id === '') return refuse('EVENT_ID_MISSING', `${from} is missing`);
  const text = typeof id === 'number' && Number.isSafeInteger(id) ? String(id) : id;
  try {
    validateKey(text);
  } catch (error) {
    return refuse('EVENT_ID_INVALID', `${from}: ${(error as Error).message}`);
  }
  const type = typeOf(fields);
  if (typeof type !== 'string') return type;
  try {
    validateEventType(type);
  } catch (error) {
    return refuse('EVENT_TYPE_INVALID', (error as Error).message);
  }
  return { ok: true, id: text as string, type, data: body };
}
