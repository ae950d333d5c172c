import { afterEach, describe, expect, it } from 'vitest';
import { migrate } from '../../src/db/migrate.js';
import type { Db } from '../../src/db/types.js';
import { enqueue, type OutboxMessage, OutboxRelay } from '../../src/host/outbox.js';
import { outboxMigrations } from '../../src/host/outbox-sql.js';
import { until } from '../support/wait.js';
import { DIALECTS, type Target, targets } from './support/targets.js';

for (const dialect of DIALECTS) {
  describe(`outbox relay on ${dialect}`, () => {
    let target: Target;
    const opened: Db[] = [];
    afterEach(async () => {
      for (const db of opened.splice(0)) await db.close();
      await target.dispose();
    });

    it('refuses the completion of a relay whose row another relay claimed after its lease ran out', async () => {
      target = targets[dialect]();
      const [db, other] = [await target.open(), await target.open()];
      opened.push(db, other);
      await migrate(db, outboxMigrations);
      await db.transaction((tx) => enqueue(tx, 'msg-1', 'note.created', { n: 1 }));

      let release: () => void = () => {};
      let started: () => void = () => {};
      const stalled = new Promise<void>((resolve) => (started = resolve));
      const late = new OutboxRelay(db, {
        target: {
          deliver: () => {
            started();
            return new Promise<void>((resolve) => (release = resolve));
          },
        },
      });
      const lateRound = late.deliverDue();
      await stalled;
      // The late relay stalled past its lease (as a paused process would); the row is due again.
      await db.run("UPDATE oncely_outbox SET lease_until = 0 WHERE id = 'msg-1'");
      // The next relay claims it and its target refuses for now: the row goes back to pending.
      const seen: OutboxMessage[] = [];
      const next = new OutboxRelay(other, {
        baseDelayMs: 60_000,
        maxDelayMs: 60_000,
        target: {
          deliver: async (message) => {
            seen.push(message);
            throw new Error('target down');
          },
        },
      });
      expect(await next.deliverDue()).toBe(1);
      expect(seen.map((m) => m.id)).toEqual(['msg-1']);

      // The late relay's delivery returns now; its completion must not mark the row delivered.
      release();
      await lateRound;
      const [row] = await db.all<Record<string, unknown>>(
        "SELECT status, attempts, fence, delivered_at, last_error FROM oncely_outbox WHERE id = 'msg-1'",
      );
      expect({ ...row, attempts: Number(row?.attempts), fence: Number(row?.fence) }).toEqual({
        status: 'pending',
        attempts: 2,
        fence: 2,
        delivered_at: null,
        last_error: 'target down',
      });
    });

    it('delivers in order, and gives back the rest of a claimed batch when stopped mid-delivery', async () => {
      target = targets[dialect]();
      const db = await target.open();
      opened.push(db);
      await migrate(db, outboxMigrations);
      for (const id of ['a-1', 'a-2', 'a-3']) await db.transaction((tx) => enqueue(tx, id, 't', { id }));
      const delivered: string[] = [];
      let relay: OutboxRelay | undefined;
      let stopping: Promise<void> | undefined;
      relay = new OutboxRelay(db, {
        target: {
          deliver: async (m) => {
            delivered.push(m.id);
            // Stopped during the first delivery: it finishes, the other two go back.
            stopping ??= relay?.stop();
          },
        },
      });
      relay.start();
      await until('the relay to be stopped during its first delivery', () => stopping !== undefined);
      await stopping;
      expect(delivered).toEqual(['a-1']);
      const rows = await db.all<{ id: string; status: string; attempts: number }>(
        'SELECT id, status, attempts FROM oncely_outbox ORDER BY id',
      );
      expect(rows.map((r) => [r.id, r.status, Number(r.attempts)])).toEqual([
        ['a-1', 'delivered', 1],
        ['a-2', 'pending', 0],
        ['a-3', 'pending', 0],
      ]);
    });
  });
}
