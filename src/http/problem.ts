import { type AnyErrorCode, ERRORS, type OncelyError, statusOf } from '../core/errors.js';
import { HEADER } from './header.js';
import type { HttpResponse } from './response.js';

const TYPE_BASE = 'https://oncely.dev/problems/';

/** An RFC 9457 problem document as an HTTP response, with oncely's stable `code`. */
export function problem(
  status: number,
  code: AnyErrorCode,
  title: string,
  detail: string,
  headers: Record<string, string> = {},
): HttpResponse {
  const body = { type: `${TYPE_BASE}${code.toLowerCase().replaceAll('_', '-')}`, title, status, detail, code };
  return {
    status,
    headers: { 'content-type': 'application/problem+json', ...headers },
    body: new TextEncoder().encode(JSON.stringify(body)),
  };
}

/**
 * The response a request gets when the engine refuses it, with the catalogue's status for its
 * code (500 for a code outside it, such as a replayed failure's own).
 */
export function problemFor(error: OncelyError): HttpResponse {
  const seconds = (ms: number | undefined) => String(Math.max(1, Math.ceil((ms ?? 1000) / 1000)));
  switch (error.code) {
    case 'KEY_REQUIRED':
      return problem(
        ERRORS.KEY_REQUIRED.status,
        'KEY_REQUIRED',
        `${HEADER} header is required`,
        `Send an ${HEADER} header naming this operation, e.g. ${HEADER}: "order-10086-charge".`,
      );
    case 'KEY_INVALID':
      return problem(ERRORS.KEY_INVALID.status, 'KEY_INVALID', `${HEADER} header is invalid`, error.message);
    case 'KEY_REUSED':
      return problem(
        ERRORS.KEY_REUSED.status,
        'KEY_REUSED',
        `${HEADER} was used with another request`,
        'This key was first used with a different request body or route; use a new key for a new request.',
      );
    case 'IN_PROGRESS':
      return problem(
        ERRORS.IN_PROGRESS.status,
        'IN_PROGRESS',
        'A request with this key is being processed',
        'Retry after the time given in Retry-After to get its response.',
        {
          'retry-after': seconds(error.retryAfterMs),
        },
      );
    case 'OUTCOME_UNKNOWN':
      return problem(
        ERRORS.OUTCOME_UNKNOWN.status,
        'OUTCOME_UNKNOWN',
        'The outcome of this request is unknown',
        'A previous attempt stopped mid-way; it will not be run again until it is reconciled.',
      );
    // A response the store refused for its size (its kept headers, or a record written before the
    // result limit was sized from maxBodyBytes) is as unreplayable as a streamed one.
    case 'RESULT_TOO_LARGE':
    case 'RESPONSE_NOT_STORED':
      return problem(
        ERRORS.RESPONSE_NOT_STORED.status,
        'RESPONSE_NOT_STORED',
        'The request was already executed',
        'Its response was streamed or too large to keep, so it cannot be replayed; it will not be executed again.',
      );
    case 'REQUEST_TOO_LARGE':
      return problem(ERRORS.REQUEST_TOO_LARGE.status, 'REQUEST_TOO_LARGE', 'Request body too large', error.message);
    case 'INVALID_ARGUMENT':
      // Tenant and action come from the request (an account header, say): a bad one is the client's.
      return problem(ERRORS.INVALID_ARGUMENT.status, 'INVALID_ARGUMENT', 'Invalid request scope', error.message);
    case 'STORE_UNAVAILABLE':
      return problem(
        ERRORS.STORE_UNAVAILABLE.status,
        'STORE_UNAVAILABLE',
        'Idempotency store unavailable',
        'The request was not executed; retry with the same key.',
        {
          'retry-after': '1',
        },
      );
    default:
      return problem(statusOf(error.code), error.code, 'Idempotency error', error.message);
  }
}
