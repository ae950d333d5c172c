import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { storm } from '../../examples/shop/storm.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';

describe('the shop under a storm (real `oncely serve` processes killed with SIGKILL, a real gateway on node:http)', () => {
  const schema = freshSchema();
  afterAll(() => dropSchema(schema));

  const check = (report: Awaited<ReturnType<typeof storm>>) => {
    expect(report.problems).toEqual([]);
    expect(report.orders).toBe(20);
    for (const effect of ['stock', 'payment', 'shipped', 'sms', 'charge', 'charge row', 'refund', 'cancelled'])
      expect(report.effects[`${effect} max per order`], effect).toBe(1);
    expect((report.outcomes.applied ?? 0) + (report.outcomes.stale ?? 0)).toBe(
      Object.values(report.outcomes).reduce((a, b) => a + b, 0),
    );
  };

  it('on SQLite, a host killed mid-charge and one mid-consumer, each replaced: every effect and charge once, no event lost', async () => {
    check(await storm(join(mkdtempSync(join(tmpdir(), 'oncely-storm-')), 'shop.db'), 1));
  });

  it('on PostgreSQL with 3 hosts, one killed mid-charge (replaced) and one mid-consumer: every effect and charge once, no event lost', async () => {
    check(await storm(`${POSTGRES_URL}?schema=${schema}`, 3));
  });
});
