/**
 * crashWindows on a flow step: the worker's process killed with SIGKILL at each window of the
 * step 'label' (claimed, before its effect, after it before its completion is stored, stored
 * before the flow moves on), the flow resumed by a fresh process's worker; the carrier (a
 * recordingDownstream) sees one label per flow, under the same step key across the takeover.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  crashWindows,
  type RecordingDownstream,
  recordingDownstream,
  StormFailedError,
} from '../../src/testing/index.js';
import type { ShipInput } from './fixtures/ship.js';

const module = fileURLToPath(new URL('./fixtures/ship.ts', import.meta.url));
let carrier: RecordingDownstream;
beforeAll(async () => {
  carrier = await recordingDownstream();
});
afterAll(() => carrier.close());

const labelsOf = (orderId: string) =>
  carrier.effects.filter((e) => (e.body as { orderId: string }).orderId === orderId).length;
const callsOf = (orderId: string) =>
  carrier.calls.filter((c) => (c.body as { orderId?: string } | undefined)?.orderId === orderId);

describe('crashWindows on a flow step', () => {
  it("the step 'label' killed at every window: a fresh worker takes the flow over; one label each, one key", async () => {
    const db = join(mkdtempSync(join(tmpdir(), 'oncely-crash-flow-')), 'flows.db');
    const input = (window: string): ShipInput => ({ db, carrier: carrier.url, orderId: `O-${window}` });
    const report = await crashWindows({
      name: 'ship-order/label',
      child: { module, export: 'ship' },
      action: 'ship-order/label',
      input,
      effects: (_, i) => labelsOf((i as ShipInput).orderId),
    });
    console.log(report.table);
    // Every window is taken over (the flow's second run): the step ran again, or answered from its memo at 'completed'.
    expect(report.cases.map((c) => [c.window, c.crashed, c.got, c.effects])).toEqual([
      ['claimed', true, 'taken over', 1],
      ['before-effect', true, 'taken over', 1],
      ['after-effect', true, 'taken over', 1],
      ['completed', true, 'taken over', 1],
    ]);
    for (const c of report.cases) {
      const orderId = `O-${c.window}`;
      const calls = callsOf(orderId);
      // The step key the carrier saw is the step's, the same on every run of the flow.
      expect(new Set(calls.map((x) => x.key))).toEqual(new Set([`ship-order-${orderId}:label`]));
      expect((c.retry.value as { key: string }).key).toBe(`ship-order-${orderId}:label`);
      // Killed after the label was bought: the takeover asked again under the same key, deduped to one.
      // Killed before the call, or after its completion was stored: the carrier was called once.
      expect(calls).toHaveLength(c.window === 'after-effect' ? 2 : 1);
    }
  }, 90_000);

  it('catches a step that gives the carrier a random key of its own: the second label, named by its window', async () => {
    const db = join(mkdtempSync(join(tmpdir(), 'oncely-crash-flow-')), 'flows.db');
    const input: ShipInput = { db, carrier: carrier.url, orderId: 'O-random', randomCarrierKey: true };
    const failure = await crashWindows({
      child: { module, export: 'ship' },
      windows: ['after-effect'],
      action: 'ship-order/label',
      input: () => input,
      effects: () => labelsOf('O-random'),
    }).catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(StormFailedError);
    expect((failure as Error).message).toContain("the crash at 'after-effect' produced a second effect (2");
  }, 60_000);
});
