/** A response as the middleware captures, stores and replays it. */
export interface HttpResponse {
  status: number;
  /** Lower-case header names. */
  headers: Record<string, string | string[]>;
  body: Uint8Array;
}

/** The stored form: JSON-safe, the body in base64 so replays are byte for byte. */
export interface StoredResponse {
  status: number;
  headers: Record<string, string | string[]>;
  body: string;
}

/** Keeps the status, the chosen headers and the exact body bytes. */
export function encodeResponse(response: HttpResponse, keep: readonly string[]): StoredResponse {
  const headers: Record<string, string | string[]> = {};
  for (const name of keep) {
    const value = response.headers[name];
    if (value !== undefined) headers[name] = value;
  }
  return { status: response.status, headers, body: Buffer.from(response.body).toString('base64') };
}

/** The response a replay sends. */
export function decodeResponse(stored: StoredResponse): HttpResponse {
  return { status: stored.status, headers: { ...stored.headers }, body: Buffer.from(stored.body, 'base64') };
}

/** Lower-cases header names and turns numbers into strings, as frameworks hand them out mixed. */
export function normalizeHeaders(headers: Record<string, unknown>): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    out[name.toLowerCase()] = Array.isArray(value) ? value.map(String) : String(value);
  }
  return out;
}
