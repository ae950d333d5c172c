import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const FILE = fileURLToPath(new URL('./runner/kit.node.ts', import.meta.url));
const SRC = fileURLToPath(new URL('../../src/testing/', import.meta.url));
const JEST_FILE = fileURLToPath(new URL('./runner/kit.jest.mjs', import.meta.url));
const JEST = join(dirname(createRequire(import.meta.url).resolve('jest/package.json')), 'bin', 'jest.js');

describe('oncely/testing is runner-agnostic', () => {
  it('runs under node:test, its storm failing where it must', () => {
    const run = spawnSync(process.execPath, ['--import', 'tsx', '--test', '--test-reporter=tap', FILE], {
      encoding: 'utf8',
      timeout: 50_000,
    });
    expect(run.status, run.stdout + run.stderr).toBe(0);
    expect(run.stdout).toMatch(/# pass 2/);
    expect(run.stdout).toMatch(/# fail 0/);
  });

  it('runs under Jest (ESM) on the built package, its storm failing where it must', () => {
    // `npm test` builds dist/ first; Jest loads `oncely/testing` through the package's exports.
    const run = spawnSync(
      process.execPath,
      ['--experimental-vm-modules', JEST, '--rootDir', dirname(JEST_FILE), '--testMatch', '**/kit.jest.mjs', '--ci'],
      { encoding: 'utf8', timeout: 50_000 },
    );
    expect(run.status, run.stdout + run.stderr).toBe(0);
    expect(run.stderr).toMatch(/Tests:\s+2 passed, 2 total/);
  });

  it('imports no test runner', () => {
    for (const name of readdirSync(SRC)) {
      const text = readFileSync(`${SRC}${name}`, 'utf8');
      expect(text, name).not.toMatch(/from '(vitest|jest|@jest\/[^']+|node:test)'/);
    }
  });
});
