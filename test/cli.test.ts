import { execFile } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);

describe('oncely demo', () => {
  it('delivers the order-paid webhook three times and sends one SMS (the built CLI)', async () => {
    const db = join(mkdtempSync(join(tmpdir(), 'oncely-demo-')), 'demo.db');
    const { stdout } = await run(process.execPath, ['dist/cli/main.js', 'demo', '--db', db]);
    const lines = stdout.trim().split('\n');
    expect(lines).toHaveLength(5);
    expect(lines[1]).toMatch(/delivery 1 .* executed /);
    expect(lines[2]).toMatch(/delivery 2 .* replayed /);
    expect(lines[3]).toMatch(/delivery 3 .* replayed /);
    expect(lines[4]).toBe('SMS sent: 1. Ledger lines: 1. Executed once, replayed 2 times.');
  });
});
