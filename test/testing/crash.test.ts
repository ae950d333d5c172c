import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  crashWindows,
  type RecordingDownstream,
  recordingDownstream,
  StormFailedError,
} from '../../src/testing/index.js';
import type { ChargeInput } from './fixtures/charge.js';

const module = fileURLToPath(new URL('./fixtures/charge.ts', import.meta.url));
let gateway: RecordingDownstream;
beforeAll(async () => {
  gateway = await recordingDownstream();
});
afterAll(() => gateway.close());

function scenario(name: string, extra: Partial<ChargeInput> = {}) {
  const db = join(mkdtempSync(join(tmpdir(), 'oncely-crash-')), 'app.db');
  const input = (window: string): ChargeInput => ({ db, gateway: gateway.url, orderId: `${name}-${window}`, ...extra });
  const charges = (_: string, i: unknown) =>
    gateway.effects.filter((e) => (e.body as { orderId: string }).orderId === (i as ChargeInput).orderId).length;
  return { db, input, charges };
}

describe('crashWindows', () => {
  it("kills the charge at every window; under 'retry' the fresh process replays or takes over with the same key: one charge each", async () => {
    const { input, charges } = scenario('retry');
    const report = await crashWindows({ name: 'charge', child: { module, export: 'charge' }, input, effects: charges });
    expect(report.cases.map((c) => [c.window, c.crashed, c.got, c.effects])).toEqual([
      ['claimed', true, 'taken over', 1],
      ['before-effect', true, 'taken over', 1],
      ['after-effect', true, 'taken over', 1],
      ['completed', true, 'replayed', 1],
    ]);
    // The takeover after the effect posted the same key twice: the gateway's dedupe held it to one.
    expect(gateway.callsWith('retry-after-effect:charge')).toBe(2);
    expect(report.table).toMatch(/after-effect\s+SIGKILL\s+taken over\s+1/);
  }, 60_000);

  it("under 'hold' a retry after the claim gets OUTCOME_UNKNOWN and nothing runs again", async () => {
    const { input, charges } = scenario('hold', { onLeaseExpired: 'hold' });
    const report = await crashWindows({
      child: { module, export: 'charge' },
      windows: ['before-effect', 'after-effect'],
      input,
      effects: charges,
    });
    expect(report.cases.map((c) => [c.window, c.got, c.effects])).toEqual([
      ['before-effect', 'OUTCOME_UNKNOWN', 0],
      ['after-effect', 'OUTCOME_UNKNOWN', 1],
    ]);
  }, 60_000);

  it('fails a charge keyed by a random value, naming the window of the second charge', async () => {
    const { input, charges } = scenario('random', { variant: 'random-key' });
    const failure = await crashWindows({
      child: { module, export: 'charge' },
      windows: ['after-effect'],
      input,
      effects: charges,
    }).catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(StormFailedError);
    expect((failure as Error).message).toContain(
      "after-effect: the crash at 'after-effect' produced a second effect (2",
    );
  }, 60_000);

  it('fails a write made before the claim, at the claimed window', async () => {
    const { db, input } = scenario('early', { variant: 'write-before-claim' });
    const ledger = (_: string, i: unknown) =>
      (
        new Database(db, { readonly: true })
          .prepare('SELECT count(*) AS n FROM ledger WHERE order_id = ?')
          .get((i as ChargeInput).orderId) as { n: number }
      ).n;
    const failure = await crashWindows({
      child: { module, export: 'charge' },
      windows: ['claimed'],
      input,
      effects: ledger,
    }).catch((e: unknown) => e);
    // Each retry writes before it claims, so the count grows with the retries made while the dead
    // holder's lease runs (IN_PROGRESS): 2 or more, by timing; the window is what must be named.
    const made = /claimed: the crash at 'claimed' produced a second effect \((\d+);/.exec((failure as Error).message);
    expect(Number(made?.[1])).toBeGreaterThanOrEqual(2);
  }, 60_000);

  it('says so when the code never reaches the window (no crashHooks in its engine)', async () => {
    const { input, charges } = scenario('nohooks');
    const failure = await crashWindows({
      child: { module, export: 'chargeWithoutHooks' },
      windows: ['claimed'],
      input,
      effects: charges,
    }).catch((e: unknown) => e);
    expect((failure as Error).message).toContain("never reached window 'claimed'");
  }, 60_000);
});
