import { createHmac, timingSafeEqual } from 'node:crypto';
import { validateKey } from '../core/key.js';

/**
 * How one source sends its events: where the event id and type are, and how requests are signed.
 * @example
 * const github: SourceConfig = { kind: 'id-header', idHeader: 'X-GitHub-Delivery', typeHeader: 'X-GitHub-Event', secret: process.env.GITHUB_SECRET };
 */
export type SourceConfig =
  | {
      /** Standard Webhooks (standardwebhooks.com): `webhook-id`, `webhook-timestamp`, `webhook-signature`. */
      kind: 'standard-webhooks';
      /** `whsec_<base64 key>`; several while a secret is rotated. */
      secret: string | readonly string[];
      /** How far `webhook-timestamp` may be from now, either way; default 300. */
      toleranceSeconds?: number;
      /** Top-level body field holding the event type; default `type`. */
      typeField?: string;
    }
  | {
      /** The event id is a header (GitHub's `X-GitHub-Delivery`); optionally an HMAC-SHA256 of the body. */
      kind: 'id-header';
      idHeader: string;
      /** Header holding the type (GitHub's `X-GitHub-Event`); else `typeField` of the body. */
      typeHeader?: string;
      typeField?: string;
      /** Header holding `sha256=<hex>`; default `X-Hub-Signature-256`. Checked only when `secret` is set. */
      hmacHeader?: string;
      secret?: string | readonly string[];
    }
  | {
      /** The event id and type are top-level body fields (Stripe's event `id` and `type`). */
      kind: 'id-field';
      idField: string;
      typeField: string;
    };

/** A request read as an event, or why it was refused (401: not authentic, 400: not readable). */
export type ReadResult =
  | { ok: true; id: string; type: string; data: unknown }
  | { ok: false; status: 400 | 401; code: string; message: string };

/** Default tolerance of Standard Webhooks timestamps, in seconds. */
export const DEFAULT_TOLERANCE_SECONDS = 300;

type Refusal = Extract<ReadResult, { ok: false }>;

const refuse = (status: 400 | 401, code: string, message: string): Refusal => ({ ok: false, status, code, message });

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
      if (source.secret !== undefined) {
        const name = (source.hmacHeader ?? 'X-Hub-Signature-256').toLowerCase();
        if (!verifyBodyHmac(secrets(source.secret), header[name], rawBody))
          return refuse(401, 'SIGNATURE_INVALID', `header ${name} is missing or does not match the body`);
      }
      const { typeHeader, typeField } = source;
      const idHeader = source.idHeader;
      return readEvent(
        rawBody,
        () => ({ id: header[idHeader.toLowerCase()], from: `header ${idHeader}` }),
        (body) => {
          if (typeHeader === undefined) return typeFrom(body, typeField ?? 'type');
          const type = header[typeHeader.toLowerCase()];
          return type ? type : refuse(400, 'EVENT_TYPE_MISSING', `header ${typeHeader} is missing`);
        },
      );
    }
    case 'id-field':
      return readEvent(
        rawBody,
        (body) => ({ id: body[source.idField], from: `body field "${source.idField}"` }),
        (body) => typeFrom(body, source.typeField),
      );
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
    return refuse(401, 'SIGNATURE_INVALID', 'headers webhook-id, webhook-timestamp and webhook-signature are required');
  if (!/^\d{1,15}$/.test(timestamp))
    return refuse(401, 'SIGNATURE_INVALID', 'webhook-timestamp must be whole seconds since the epoch');
  const tolerance = source.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS;
  // Both ways: an old timestamp is a replay, a future one would stay "fresh" for too long.
  if (Math.abs(now / 1000 - Number(timestamp)) > tolerance)
    return refuse(401, 'TIMESTAMP_OUT_OF_TOLERANCE', `webhook-timestamp is more than ${tolerance}s from now`);
  const given = signature
    .split(' ')
    .filter((s) => s.startsWith('v1,'))
    .map((s) => Buffer.from(s.slice(3), 'base64'));
  for (const secret of secrets(source.secret)) {
    const expected = standardHmac(secretKey(secret), id, timestamp, rawBody);
    if (given.some((g) => g.length === expected.length && timingSafeEqual(g, expected))) return undefined;
  }
  return refuse(401, 'SIGNATURE_INVALID', 'no v1 signature in webhook-signature matches a configured secret');
}

function verifyBodyHmac(keys: readonly string[], signature: string | undefined, rawBody: Buffer): boolean {
  if (!signature?.startsWith('sha256=')) return false;
  const hex = signature.slice(7);
  if (!/^[0-9a-fA-F]{64}$/.test(hex)) return false;
  const given = Buffer.from(hex, 'hex');
  return keys.some((key) => timingSafeEqual(given, createHmac('sha256', key).update(rawBody).digest()));
}

function standardHmac(key: Buffer, id: string, timestamp: string, body: string | Buffer): Buffer {
  return createHmac('sha256', key).update(`${id}.${timestamp}.`).update(body).digest();
}

// As the reference libraries do: the `whsec_` prefix is optional, the rest is the base64 key.
function secretKey(secret: string): Buffer {
  return Buffer.from(secret.startsWith('whsec_') ? secret.slice(6) : secret, 'base64');
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
    : refuse(400, 'BODY_INVALID', `body field "${field}" must be a non-empty string (the event type)`);
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
    return refuse(400, 'BODY_INVALID', 'body is not JSON');
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body))
    return refuse(400, 'BODY_INVALID', 'body must be a JSON object');
  const fields = body as Record<string, unknown>;
  const { id, from } = idOf(fields);
  if (id === undefined || id === null || id === '') return refuse(400, 'EVENT_ID_MISSING', `${from} is missing`);
  const text = typeof id === 'number' && Number.isSafeInteger(id) ? String(id) : id;
  try {
    validateKey(text);
  } catch (error) {
    return refuse(400, 'EVENT_ID_INVALID', `${from}: ${(error as Error).message}`);
  }
  const type = typeOf(fields);
  if (typeof type !== 'string') return type;
  return { ok: true, id: text as string, type, data: body };
}
