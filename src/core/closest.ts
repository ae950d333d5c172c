import { OncelyError } from './errors.js';

/** Edits (insert, delete, substitute, swap two neighbours) that turn `a` into `b`. */
export function editDistance(a: string, b: string): number {
  const rows: number[][] = [];
  for (let i = 0; i <= a.length; i++) {
    const row: number[] = [i];
    for (let j = 1; j <= b.length; j++) {
      if (i === 0) {
        row.push(j);
        continue;
      }
      const above = rows[i - 1] as number[];
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min((above[j] as number) + 1, (row[j - 1] as number) + 1, (above[j - 1] as number) + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        best = Math.min(best, ((rows[i - 2] as number[])[j - 2] as number) + 1);
      row.push(best);
    }
    rows.push(row);
  }
  return (rows[a.length] as number[])[b.length] as number;
}

/** The known name nearest to `name` (case ignored), when it is near enough to be the one meant. */
export function closest(name: string, known: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const candidate of known) {
    const distance = editDistance(name.toLowerCase(), candidate.toLowerCase());
    if (distance < bestDistance) [best, bestDistance] = [candidate, distance];
  }
  return bestDistance <= Math.max(2, Math.floor(name.length / 3)) ? best : undefined;
}

/**
 * Refuses an object (a config, a module's exports) with a key nobody reads: CONFIG_KEY_UNKNOWN
 * naming `where`, the key (under `path`, e.g. 'events.') and the nearest known one, so a typo
 * stops the start instead of leaving a default silently in force.
 */
export function refuseUnknownKeys(object: object, known: readonly string[], where: string, path = ''): void {
  for (const key of Object.keys(object)) {
    if (known.includes(key)) continue;
    const near = closest(key, known);
    const hint = near === undefined ? `known keys: ${known.join(', ')}` : `did you mean '${path}${near}'?`;
    throw new OncelyError('CONFIG_KEY_UNKNOWN', `${where}: unknown key '${path}${key}' (${hint})`);
  }
}
