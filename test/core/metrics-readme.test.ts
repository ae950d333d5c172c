/**
 * The README's metrics table ("Operating oncely") must list exactly the catalogue METRICS in
 * src/core/metrics.ts: every name, with its type and its labels in order.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { METRICS } from '../../src/core/metrics.js';

const README = fileURLToPath(new URL('../../README.md', import.meta.url));

/** Rows of the table whose header starts `| metric | type | labels |`. */
function readmeRows(): { name: string; type: string; labels: string[] }[] {
  const lines = readFileSync(README, 'utf8').split('\n');
  const start = lines.findIndex((l) => l.startsWith('| metric | type | labels |'));
  expect(start, 'the README has a metrics table').toBeGreaterThan(0);
  const rows = [];
  for (const line of lines.slice(start + 2)) {
    if (!line.startsWith('|')) break;
    const [name, type, labels] = line
      .split('|')
      .slice(1, 4)
      .map((c) => c.trim());
    rows.push({
      name: (name ?? '').replace(/`/g, ''),
      type: type ?? '',
      labels: [...(labels ?? '').matchAll(/`([a-z_]+)`/g)].map((m) => m[1] as string),
    });
  }
  return rows;
}

describe('README metrics table', () => {
  it('lists every metric of the catalogue, with its type and labels, and nothing else', () => {
    const expected = Object.entries(METRICS).map(([name, m]) => ({ name, type: m.type, labels: [...m.labels] }));
    expect(readmeRows()).toEqual(expected);
  });
});
