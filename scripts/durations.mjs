// Per-file durations of a vitest JSON report, slowest first, beside a baseline report when given:
//   npx vitest run --reporter=default --reporter=json --outputFile.json=after.json
//   node scripts/durations.mjs after.json [before.json] [--top N]
import { readFileSync } from 'node:fs';
import { relative } from 'node:path';

const args = process.argv.slice(2);
const topAt = args.indexOf('--top');
const top = topAt >= 0 ? Number(args.splice(topAt, 2)[1]) : Number.POSITIVE_INFINITY;
const [after, before] = args;
if (!after) {
  console.error('usage: node scripts/durations.mjs <report.json> [baseline.json] [--top N]');
  process.exit(2);
}

/** Seconds per test file (relative to this folder) of one report. */
function durations(file) {
  const report = JSON.parse(readFileSync(file, 'utf8'));
  return new Map(report.testResults.map((t) => [relative(process.cwd(), t.name), (t.endTime - t.startTime) / 1_000]));
}

const now = durations(after);
const then = before ? durations(before) : new Map();
const sum = (m) => [...m.values()].reduce((a, b) => a + b, 0);
const s = (n) => (n === undefined ? '-' : n.toFixed(1));
const rows = [...now].sort((a, b) => b[1] - a[1]).slice(0, top);
console.log(before ? '| file | before s | after s |\n| --- | ---: | ---: |' : '| file | s |\n| --- | ---: |');
for (const [file, secs] of rows)
  console.log(before ? `| ${file} | ${s(then.get(file))} | ${s(secs)} |` : `| ${file} | ${s(secs)} |`);
const gone = [...then.keys()].filter((f) => !now.has(f));
for (const file of gone) console.log(`| ${file} | ${s(then.get(file))} | (gone) |`);
console.log(
  before
    ? `| all ${now.size} files (sum of file times) | ${s(sum(then))} | ${s(sum(now))} |`
    : `| all ${now.size} files (sum of file times) | ${s(sum(now))} |`,
);
