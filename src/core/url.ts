import { OncelyError } from './errors.js';

/** `target` with the password of its user part hidden, for messages and logs. */
export function redactUrl(target: string): string {
  return target.replace(/^([a-z][a-z0-9+.-]*:\/\/[^:/@]*):[^@/]*@/i, '$1:***@');
}

/**
 * A connection URL, checked when the store or database is created rather than at its first call:
 * URL_INVALID when it does not parse or names no host (a `host` query parameter, a socket folder,
 * counts as one).
 */
export function checkUrl(target: string, what: string): URL {
  let url: URL;
  try {
    url = new URL(target);
  } catch (cause) {
    throw new OncelyError('URL_INVALID', `${what} ${redactUrl(target)} is not a valid URL`, { cause });
  }
  if (url.hostname === '' && !url.searchParams.has('host'))
    throw new OncelyError('URL_INVALID', `${what} ${redactUrl(target)} names no host`);
  return url;
}
