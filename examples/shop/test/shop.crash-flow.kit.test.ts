/**
 * The shop's fulfilment flow killed with SIGKILL at every window of its step 'pack' (claimed,
 * before its effect, after it before its completion is stored, stored before the flow moves on),
 * and resumed by a fresh process's host: one flow per order, completed, its step stored once.
 */
import { join } from 'node:path';
import { crashWindows } from 'oncely/testing';
import { beforeAll, describe, expect, it } from 'vitest';
import { APP, count, paidOrderPerWindow } from './client.js';

process.env.ONCELY_DEMO = '1';
const WINDOWS = ['claimed', 'before-effect', 'after-effect', 'completed'] as const;

describe("the shop's fulfilment flow killed at every window of its step", () => {
  const env = { ONCELY_DEMO: '1' };
  // One database per window: every child's host runs a flow worker, which would otherwise claim
  // another window's flow run before that window's own child reached its crash point.
  const shops = new Map<string, { db: string; order: string }>();
  const shop = (w: string) => {
    const s = shops.get(w);
    if (!s) throw new Error(`no shop prepared for window ${w}`);
    return s;
  };
  beforeAll(async () => {
    await Promise.all(
      WINDOWS.map(async (w) => {
        const { db, orders } = await paidOrderPerWindow(`oncely-shop-flow-crash-${w}-`, [w]);
        const order = orders[w];
        if (!order) throw new Error(`no paid order for window ${w}`);
        shops.set(w, { db, order });
      }),
    );
  }, 60_000);

  it("order-fulfilment/pack: the fresh host takes the flow over after the shop's 5 s flow lease; one flow each, 'pack' stored once", async () => {
    const report = await crashWindows({
      name: 'order-fulfilment/pack',
      child: { module: join(APP, 'test', 'fulfil-flow.ts'), export: 'fulfilFlow', env },
      // Only the flow's step dies: the handler that starts it passes its own windows.
      action: 'order-fulfilment/pack',
      // The shop's flows lease for 5 s (oncely.config.ts): the four windows wait it out together.
      parallel: true,
      input: (w) => ({ db: shop(w).db, orderId: shop(w).order, key: `fulfil-${w}` }),
      effects: (w) =>
        count(shop(w).db, 'SELECT count(*) AS n FROM oncely_flows WHERE biz_id LIKE ?', `%${shop(w).order}%`),
    });
    console.log(report.table);
    expect(report.cases.map((c) => [c.window, c.crashed, c.got, c.effects])).toEqual(
      WINDOWS.map((w) => [w, true, 'taken over', 1]),
    );
    for (const w of WINDOWS) {
      const { db, order } = shop(w);
      const c = report.cases.find((x) => x.window === w);
      expect(c?.retry.value).toBe(`packed ${order}`);
      const flow = `%${order}%`;
      expect(
        count(
          db,
          "SELECT count(*) AS n FROM oncely_flows WHERE biz_id LIKE ? AND status = 'completed' AND runs = 2",
          flow,
        ),
      ).toBe(1);
      // Stored by the takeover (run 2), or at 'completed' by the run that died (run 1) and answered from its memo.
      const run = w === 'completed' ? 1 : 2;
      expect(
        count(
          db,
          `SELECT count(*) AS n FROM oncely_flow_steps s JOIN oncely_flows f ON f.workflow_id = s.workflow_id
            WHERE f.biz_id LIKE ? AND s.step_id = 'pack' AND s.status = 'completed' AND s.run = ?`,
          flow,
          run,
        ),
      ).toBe(1);
    }
  }, 120_000);
});
