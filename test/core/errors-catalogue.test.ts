/**
 * The catalogue in src/core/errors.ts is the one list of oncely's error codes. The README's error
 * tables (every table whose first column names codes in backticks) must name exactly its codes,
 * with its statuses, and its "Error codes" table must be the catalogue itself; every code written
 * into src/ where an error is built must be one of it.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ERRORS, isErrorCode, OncelyError, ReplayedError, statusOf } from '../../src/core/errors.js';
import { decodeError, encodeError } from '../../src/engine/outcome.js';

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const CODE = /`([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|[A-Z]{4,})`/g;

interface Row {
  line: number;
  codes: string[];
  /** The HTTP status the row gives its codes: a leading number, or a `status` column. */
  status: number | undefined;
  cells: string[];
}

interface Table {
  heading: string;
  header: string[];
  rows: Row[];
}

/** A markdown row's cells, split on pipes outside backticks. */
function cellsOf(line: string): string[] {
  const cells: string[] = [];
  let cell = '';
  let quoted = false;
  for (const char of line.trim().slice(1, -1)) {
    if (char === '`') quoted = !quoted;
    if (char === '|' && !quoted) {
      cells.push(cell.trim());
      cell = '';
    } else cell += char;
  }
  cells.push(cell.trim());
  return cells;
}

/** The README's tables whose first column names codes, each row with its codes and status. */
function errorTables(): Table[] {
  const lines = readFileSync(join(REPO, 'README.md'), 'utf8').split('\n');
  const tables: Table[] = [];
  let heading = '';
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] ?? '';
    if (line.startsWith('#')) heading = line.replace(/^#+\s*/, '');
    if (!line.startsWith('|') || !(lines[i + 1] ?? '').startsWith('| ---')) continue;
    const header = cellsOf(line);
    const statusColumn = header.indexOf('status');
    const rows: Row[] = [];
    for (i += 2; (lines[i] ?? '').startsWith('|'); i++) {
      const cells = cellsOf(lines[i] ?? '');
      const first = cells[0] ?? '';
      const codes = [...first.matchAll(CODE)].map((m) => m[1] ?? '');
      const leading = /^(\d{3})\b/.exec(first)?.[1] ?? (statusColumn > 0 ? cells[statusColumn] : undefined);
      rows.push({ line: i + 1, codes, status: leading === undefined ? undefined : Number(leading), cells });
    }
    if (rows.some((row) => row.codes.length > 0)) tables.push({ heading, header, rows });
  }
  return tables;
}

/** The catalogue as the README's "Error codes" table, to paste when the catalogue changes. */
function catalogueTable(): string {
  return [
    '| code | status | meaning |',
    '| --- | --- | --- |',
    ...Object.entries(ERRORS).map(([code, { status, meaning }]) => `| \`${code}\` | ${status} | ${meaning} |`),
  ].join('\n');
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

// Where src/ writes a code: the first quoted argument (after at most one other, a status or a
// request id) of an error or refusal being built, and any quoted code in a `code:` property.
const BUILT =
  /(?:new OncelyError|new Refusal|super|refuse|failed|failure|problem)\(\s*(?:[^,()'`]+,\s*)?'([A-Z][A-Z0-9_]+)'/g;
const PROPERTY = /\bcode:([^,}\n]*)/g;
const QUOTED = /'([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)'/g;

describe('the error catalogue', () => {
  it('has one line of meaning and an HTTP status for every code', () => {
    for (const [code, { status, meaning }] of Object.entries(ERRORS)) {
      expect(code, code).toMatch(/^[A-Z][A-Z0-9_]+$/);
      expect(status >= 400 && status < 600, `${code} status ${status}`).toBe(true);
      expect(meaning, code).not.toMatch(/\n|\|/);
      expect(meaning.length, code).toBeGreaterThan(0);
    }
  });

  it('agrees with every error table of the README: the same codes, the same HTTP statuses', () => {
    const tables = errorTables();
    expect(tables.map((t) => t.heading)).toEqual(expect.arrayContaining(['Errors', 'Error codes']));
    const problems: string[] = [];
    const named = new Set<string>();
    for (const table of tables)
      for (const row of table.rows)
        for (const code of row.codes) {
          named.add(code);
          if (!isErrorCode(code)) problems.push(`README.md:${row.line} names ${code}, which is not in ERRORS`);
          else if (row.status !== undefined && row.status !== ERRORS[code].status)
            problems.push(
              `README.md:${row.line} answers ${code} with ${row.status}; ERRORS says ${ERRORS[code].status}`,
            );
        }
    for (const code of Object.keys(ERRORS))
      if (!named.has(code)) problems.push(`${code} is in ERRORS but in no error table of the README`);
    expect(problems).toEqual([]);
  });

  it('is the README\'s "Error codes" table, row for row', () => {
    const table = errorTables().find((t) => t.heading === 'Error codes');
    const written = ['| code | status | meaning |', '| --- | --- | --- |'];
    for (const row of table?.rows ?? []) written.push(`| ${row.cells.join(' | ')} |`);
    expect(written.join('\n'), 'paste this table under "## Error codes"').toBe(catalogueTable());
  });

  it('holds every code src/ builds an error or an answer with', () => {
    const problems: string[] = [];
    for (const file of sourceFiles(join(REPO, 'src'))) {
      if (file.endsWith(join('core', 'errors.ts'))) continue;
      const text = readFileSync(file, 'utf8');
      const found = [...text.matchAll(BUILT)].map((m) => m[1] ?? '');
      for (const m of text.matchAll(PROPERTY)) found.push(...[...(m[1] ?? '').matchAll(QUOTED)].map((q) => q[1] ?? ''));
      for (const code of found)
        if (!isErrorCode(code)) problems.push(`${file.slice(REPO.length)}: ${code} is not in ERRORS`);
    }
    expect(problems).toEqual([]);
  });

  it('replays a stored failure with its own code, which may be outside the catalogue', () => {
    const record = { key: 'K-1', action: 'charge' } as Parameters<typeof decodeError>[1];
    const stored = Object.assign(new Error('card declined'), { name: 'PaymentError', code: 'CARD_DECLINED' });
    const replayed = decodeError(encodeError(stored), record);
    expect(replayed).toBeInstanceOf(OncelyError);
    expect(replayed).toBeInstanceOf(ReplayedError);
    expect({
      code: replayed.code,
      name: replayed.name,
      message: replayed.message,
      replayed: replayed.replayed,
    }).toEqual({
      code: 'CARD_DECLINED',
      name: 'PaymentError',
      message: 'card declined',
      replayed: true,
    });
    expect(statusOf(replayed.code)).toBe(500);
    expect(isErrorCode('toString')).toBe(false);
  });
});
