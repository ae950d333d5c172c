/** How values read on the page. */

/** An epoch-ms time as `YYYY-MM-DD hh:mm:ss` (UTC), `-` when there is none. */
export const when = (ms: number | null | undefined): string =>
  ms === null || ms === undefined ? '-' : new Date(Number(ms)).toISOString().replace('T', ' ').slice(0, 19);

/** A rate as a percentage; `n/a` while nothing was counted (the API's null). */
export const percent = (v: number | null | undefined): string =>
  v === null || v === undefined ? 'n/a' : `${(v * 100).toFixed(v === 1 || v === 0 ? 0 : 2)}%`;

/** A value as indented JSON. */
export const json = (v: unknown): string => JSON.stringify(v, null, 2);

/** The message of a thrown value. */
export const messageOf = (error: unknown): string => (error instanceof Error ? error.message : String(error));
