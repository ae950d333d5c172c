import { OncelyError } from '../core/errors.js';
import { bufferView } from '../http/response.js';
import { readBody } from '../http/web.js';

/** Largest request body the host reads unless configured otherwise: 1 MiB. */
export const DEFAULT_MAX_BODY_BYTES = 1024 * 1024;

/** A configured byte limit, or the default; anything but a positive whole number (NaN would mean no limit) fails at start. */
export function byteLimit(value: number | undefined, what: string): number {
  if (value === undefined) return DEFAULT_MAX_BODY_BYTES;
  if (!Number.isSafeInteger(value) || value <= 0)
    throw new OncelyError('INVALID_ARGUMENT', `${what} must be a positive whole number of bytes, got ${String(value)}`);
  return value;
}

/** A request body read under a cap: its bytes, or `tooLarge` once it passed the cap (the rest never read). */
export type CappedBody = { ok: true; body: Buffer } | { ok: false; tooLarge: true };

/**
 * Reads a request body without ever holding more than `maxBytes` of it. A declared Content-Length
 * over the cap is refused before a byte is read; a chunked body (no Content-Length) is counted as
 * it streams (the HTTP middleware's reader) and the stream is cancelled at the cap, so an oversized
 * upload costs at most the cap.
 */
export async function readBodyCapped(request: Request, maxBytes: number): Promise<CappedBody> {
  const declared = request.headers.get('content-length');
  if (declared !== null && Number(declared) > maxBytes) return { ok: false, tooLarge: true };
  const bytes = await readBody(request, maxBytes);
  if (bytes === undefined) {
    // Cancelling stops the server from buffering the rest; the caller answers 413 at once.
    await request.body?.cancel().catch(() => undefined);
    return { ok: false, tooLarge: true };
  }
  return { ok: true, body: bufferView(bytes) };
}
