/**
 * Who may call the admin API: the holder of `ONCELY_ADMIN_TOKEN` (a bearer token, compared in
 * constant time), or, while no token is set, only a client on this machine (loopback).
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { OncelyError } from '../core/errors.js';

/** The shortest token accepted: a guessable admin token is no protection. */
export const ADMIN_TOKEN_MIN_LENGTH = 16;
/** Longest `X-Oncely-Operator` name kept. */
export const OPERATOR_MAX_LENGTH = 128;
/** The header naming the person behind an admin request, kept in the audit and in settlements. */
export const OPERATOR_HEADER = 'x-oncely-operator';

/** Who made an admin request: by the bearer token or from loopback, and the person it names, if any. */
export interface AdminIdentity {
  who: 'token' | 'loopback';
  operator: string | null;
}

/** An admin request let in (its identity), or refused with the status and code to answer. */
export type AdminAccess =
  | { ok: true; identity: AdminIdentity }
  | { ok: false; status: number; code: 'ADMIN_UNAUTHORIZED' | 'ADMIN_FORBIDDEN' | 'INVALID_ARGUMENT'; message: string };

/**
 * The admin token a host uses: the one given, else `ONCELY_ADMIN_TOKEN`; undefined (loopback only)
 * when neither is set or it is empty. A token shorter than ADMIN_TOKEN_MIN_LENGTH or holding
 * whitespace fails at start (CONFIG_INVALID), not at the first request.
 */
export function adminToken(given?: string, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const token = given ?? env.ONCELY_ADMIN_TOKEN;
  if (token === undefined || token === '') return undefined;
  if (token.length < ADMIN_TOKEN_MIN_LENGTH || /\s/.test(token))
    throw new OncelyError(
      'CONFIG_INVALID',
      `ONCELY_ADMIN_TOKEN must be at least ${ADMIN_TOKEN_MIN_LENGTH} characters without spaces (e.g. openssl rand -hex 32)`,
    );
  return token;
}

/** The admin API's mode as one line for `oncely serve`'s banner. */
export function adminModeLine(token: string | undefined): string {
  return token
    ? 'admin API: /v1/admin (bearer token of ONCELY_ADMIN_TOKEN)'
    : 'admin API: /v1/admin, loopback only: set ONCELY_ADMIN_TOKEN to open it';
}

const digest = (text: string) => createHash('sha256').update(text).digest();

/** Whether an address the socket reports is this machine: 127.0.0.0/8, ::1, or 127.x mapped into IPv6. */
export function isLoopback(address: string | undefined): boolean {
  if (!address) return false;
  const v4 = address.toLowerCase().startsWith('::ffff:') ? address.slice(7) : address;
  return v4 === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(v4);
}

/**
 * Decides one request. `expected` is tokenDigest(token), undefined with no token (loopback only).
 * `remoteAddress` is the node socket's (never a forwarded header, which any client can write);
 * undefined (no socket: an in-process fetch) is not loopback.
 */
export function checkAccess(
  expected: Buffer | undefined,
  headers: Headers,
  remoteAddress: string | undefined,
): AdminAccess {
  let who: AdminIdentity['who'];
  if (expected) {
    const match = /^Bearer +(\S+) *$/i.exec(headers.get('authorization') ?? '');
    // Digests of equal length: the comparison time tells nothing of the token's length or prefix.
    if (!match || !timingSafeEqual(digest(match[1] as string), expected))
      return {
        ok: false,
        status: 401,
        code: 'ADMIN_UNAUTHORIZED',
        message: match ? 'the bearer token is not the admin token' : 'send Authorization: Bearer <ONCELY_ADMIN_TOKEN>',
      };
    who = 'token';
  } else {
    if (!isLoopback(remoteAddress))
      return {
        ok: false,
        status: 403,
        code: 'ADMIN_FORBIDDEN',
        message: 'with no ONCELY_ADMIN_TOKEN set, the admin API answers only clients on this machine',
      };
    who = 'loopback';
  }
  const operator = headers.get(OPERATOR_HEADER);
  if (operator === null) return { ok: true, identity: { who, operator: null } };
  if (operator.length > OPERATOR_MAX_LENGTH || !/^[\x20-\x7e]*[\x21-\x7e][\x20-\x7e]*$/.test(operator))
    return {
      ok: false,
      status: 400,
      code: 'INVALID_ARGUMENT',
      message: `${OPERATOR_HEADER} must be 1 to ${OPERATOR_MAX_LENGTH} printable ASCII characters`,
    };
  return { ok: true, identity: { who, operator: operator.trim() } };
}

/** Methods that change nothing: any page may send them, and reads none of the answers (no CORS headers). */
const SAFE_METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * Why a request that may change something was sent by a page of another site, or undefined when it
 * was not. Browsers say where a request comes from: `Sec-Fetch-Site` (`same-site` is another port
 * or subdomain of the same site, still not this host) and `Origin`, sent with every POST, which must
 * then be this host's own, the one the `Host` header names (scheme and default port aside: a proxy
 * that ends TLS passes http on). Clients that are not browsers (curl, scripts) send neither.
 * Read from the headers alone, before any of the body.
 */
export function crossSite(method: string, headers: Headers): string | undefined {
  if (SAFE_METHODS.has(method)) return undefined;
  const site = headers.get('sec-fetch-site');
  if (site === 'cross-site' || site === 'same-site') return `Sec-Fetch-Site is ${site}`;
  const origin = headers.get('origin');
  if (origin !== null && !sameHost(origin, headers.get('host')))
    return `Origin ${origin.slice(0, 200)} is not this host (${headers.get('host') ?? 'no Host'})`;
  return undefined;
}

/** Whether an Origin names the host a Host header names: `http://localhost:3000` and `localhost:3000`. */
function sameHost(origin: string, host: string | null): boolean {
  let url: URL;
  try {
    url = new URL(origin);
  } catch {
    // `null` (a sandboxed frame, a file page) and anything else unreadable is no host of ours.
    return false;
  }
  if (!host || (url.protocol !== 'http:' && url.protocol !== 'https:')) return false;
  const given = host.toLowerCase();
  const port = url.port || (url.protocol === 'https:' ? '443' : '80');
  return given === url.host || given === `${url.hostname}:${port}`;
}

/** The identity as a settler's name (`settlement.by`, an approval's `decided_by`): `admin:token[:<operator>]`. */
export function settlerName(identity: AdminIdentity): string {
  return `admin:${identity.who}${identity.operator ? `:${identity.operator}` : ''}`;
}

/** Builds the digest of the token once, for checkAccess's `expected`. */
export function tokenDigest(token: string | undefined): Buffer | undefined {
  return token === undefined ? undefined : digest(token);
}

/** The host name of a Host header: `localhost:3000` -> `localhost`, `[::1]:3000` -> `::1`. */
export function hostName(host: string | undefined): string | undefined {
  if (!host) return undefined;
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(host);
  if (bracketed) return bracketed[1];
  const name = host.replace(/:\d+$/, '').toLowerCase();
  // localhost is this machine by definition (RFC 6761); the check is against names a rebinding page cannot use.
  return name === 'localhost' ? '127.0.0.1' : name;
}
