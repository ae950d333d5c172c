/**
 * The shop's third handler, orders.fulfil (effects 'external': its claim commits first, then the
 * order's move and the flow's start), killed with SIGKILL at every crash window and retried from
 * a fresh process: one fulfilment flow per order whichever window the host died in.
 */
import { join } from 'node:path';
import { crashWindows } from 'oncely/testing';
import { beforeAll, describe, expect, it } from 'vitest';
import { APP, count, paidOrderPerWindow } from './client.js';

process.env.ONCELY_DEMO = '1';
const WINDOWS = ['claimed', 'before-effect', 'after-effect', 'completed'] as const;

describe('the shop handler orders.fulfil killed at every crash window', () => {
  const env = { ONCELY_DEMO: '1' };
  let db = '';
  let orders: Record<string, string> = {};
  beforeAll(async () => {
    ({ db, orders } = await paidOrderPerWindow('oncely-shop-fulfil-crash-', WINDOWS));
  }, 60_000);

  it('one flow per order; the retry takes the claim over after the handler’s 5 s lease, or replays at completed', async () => {
    const report = await crashWindows({
      name: 'orders.fulfil',
      child: { module: join(APP, 'test', 'client.ts'), export: 'invoke', env },
      action: 'POST orders.fulfil',
      // orders.fulfil leases for 5 s: the four windows wait it out together.
      parallel: true,
      retryFor: '30s',
      input: (w) => ({ db, handler: 'orders.fulfil', key: `fulfil-${w}`, body: { orderId: orders[w] } }),
      effects: (w) => count(db, 'SELECT count(*) AS n FROM oncely_flows WHERE biz_id LIKE ?', `%${orders[w]}%`),
    });
    console.log(report.table);
    expect(Object.fromEntries(report.cases.map((c) => [c.window, c.got]))).toEqual({
      claimed: 'taken over',
      'before-effect': 'taken over',
      'after-effect': 'taken over',
      completed: 'replayed',
    });
    for (const w of WINDOWS) {
      expect(count(db, "SELECT count(*) AS n FROM orders WHERE id = ? AND status = 'fulfilling'", orders[w])).toBe(1);
      // The takeover found the order moved (0 rows) and the flow started: the same flow, answered again.
      const c = report.cases.find((x) => x.window === w);
      expect((c?.retry.value as { workflowId?: string } | undefined)?.workflowId).toBeTruthy();
    }
  }, 120_000);
});
