/**
 * A broker message's body as every source reads it: JSON, under the source's byte cap. A body over
 * the cap is never decoded; one that cannot be read becomes the message's `refusal`, which the inbox
 * rejects with one log line, as it does a message without an id.
 */
import { byteLimit } from '../host/body.js';

/** The body cap every source takes. */
export interface BodyOptions {
  /**
   * Largest body taken, in bytes; a larger message is rejected unread, to the broker's dead-letter
   * mechanism. Default 1 MiB, as a webhook source's `maxBodyBytes`.
   */
  maxBodyBytes?: number;
}

/** A source's body cap, checked at construction: a bad one fails the start. */
export function bodyLimit(options: BodyOptions, what: string): number {
  return byteLimit(options.maxBodyBytes, `${what}: maxBodyBytes`);
}

/** What a source hands the inbox of a body: its JSON value, or why it cannot be taken. */
export type Body = { data: unknown; refusal?: undefined } | { data: null; refusal: string };

/** Decodes a body of at most `maxBytes` bytes as JSON (an absent body is null). */
export function readBody(body: Uint8Array | string | undefined, maxBytes: number): Body {
  if (body === undefined) return { data: null };
  const bytes = typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength;
  if (bytes > maxBytes)
    return { data: null, refusal: `the body is ${bytes} bytes, over the source's maxBodyBytes (${maxBytes})` };
  try {
    return { data: JSON.parse(typeof body === 'string' ? body : new TextDecoder().decode(body)) };
  } catch {
    return { data: null, refusal: 'the body is not JSON' };
  }
}
