import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { openDb } from '../../src/db/index.js';
import { EventQueue } from '../../src/host/events.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { startWorker, type Worker } from '../support/spawn.js';
import { closeAdmin, freshStream, until } from './support/nats.js';

const HOST = fileURLToPath(new URL('./support/storm-host.ts', import.meta.url));
const MESSAGES = 2_000;
const HOSTS = 3;

describe('the broker storm: 3 hosts on PostgreSQL consume one JetStream stream, killed with SIGKILL at random and restarted', () => {
  const schema = freshSchema();
  afterAll(async () => {
    await closeAdmin();
    await dropSchema(schema);
  });

  it('runs every effect once, loses nothing and counts the duplicates', async () => {
    const url = `${POSTGRES_URL}?schema=${schema}`;
    // A window shorter than the gaps between copies: JetStream stores the copies, oncely dedupes them.
    const stream = await freshStream(100);
    const job = {
      db: url,
      stream: stream.stream,
      subject: stream.subject('in.>'),
      type: stream.subject('in.order.paid'),
      source: 'orders',
    };
    const hosts: Worker[] = [];
    const spawnHost = async (slot: number) => {
      hosts[slot] = startWorker(job, HOST);
      await hosts[slot].waitFor('ready');
    };
    const db = await openDb(url);
    try {
      // The first host migrates alone; the others start beside it.
      await spawnHost(0);
      await Promise.all([1, 2].map(spawnHost));

      // Each id 1 to 3 times, the copies spread over the run in random order.
      const sends: string[] = [];
      for (let i = 0; i < MESSAGES; i++)
        for (let n = 1 + Math.floor(Math.random() * 3); n > 0; n--) sends.push(`m${i}`);
      for (let i = sends.length - 1; i > 0; i--) {
        const j = Math.floor(Math.random() * (i + 1));
        [sends[i], sends[j]] = [sends[j] as string, sends[i] as string];
      }
      let stored = 0;
      let kills = 0;
      const publishing = (async () => {
        for (let i = 0; i < sends.length; i += 50) {
          const acks = await Promise.all(
            sends.slice(i, i + 50).map((id) => stream.publish('in.order.paid', { id }, id)),
          );
          stored += acks.filter((a) => !a.duplicate).length;
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
      })();
      const killing = (async () => {
        for (let round = 0; round < 4; round++) {
          await new Promise((resolve) => setTimeout(resolve, 1_500 + Math.random() * 1_000));
          const slot = Math.floor(Math.random() * HOSTS);
          hosts[slot]?.child.kill('SIGKILL');
          await hosts[slot]?.exited;
          kills++;
          await spawnHost(slot);
        }
      })();
      await Promise.all([publishing, killing]);

      const counts = async () =>
        (
          await db.all<{ runs: number | string; ids: number | string }>(
            'SELECT COUNT(*) AS runs, COUNT(DISTINCT event_id) AS ids FROM effects',
          )
        )[0];
      let seen = '';
      const progress = async () => {
        const c = await counts();
        const byStatus = await db.all<{ status: string; n: number | string }>(
          'SELECT status, COUNT(*) AS n FROM oncely_events GROUP BY status ORDER BY status',
        );
        seen = `effects ${c?.runs}/${c?.ids} ids, events ${byStatus.map((r) => `${r.status} ${r.n}`).join(', ')}, consumer ${JSON.stringify(await stream.consumer('storm'))}`;
        return Number(c?.ids) === MESSAGES;
      };
      await until('every message consumed', progress, 60_000).catch((error) => {
        throw new Error(`${error.message}: ${seen}`);
      });
      await until(
        'every message acked',
        async () => {
          const c = await stream.consumer('storm');
          return c.pending === 0 && c.ackPending === 0;
        },
        30_000,
      );
      const events = new EventQueue(db, { consumerFor: () => undefined });
      await events.drain(30_000);
      const final = await counts();
      expect([Number(final?.runs), Number(final?.ids)]).toEqual([MESSAGES, MESSAGES]);
      const stats = await events.stats();
      expect(stats.accepted).toBe(MESSAGES);
      expect(stats.applied).toBe(MESSAGES);
      expect(stats.dead_lettered).toBe(0);
      // Every stored copy past the first was answered as a duplicate; a message committed by a host
      // killed before its ack came back once more, a duplicate too.
      expect(stats.duplicate).toBeGreaterThanOrEqual(stored - MESSAGES);
      expect(stored).toBeGreaterThan(MESSAGES);
      expect(kills).toBe(4);
      console.log(
        `storm: ${sends.length} publishes of ${MESSAGES} ids, ${stored} stored by JetStream, ${stats.duplicate} duplicates counted, ${kills} hosts killed`,
      );
    } finally {
      for (const host of hosts) host?.child.kill('SIGKILL');
      await Promise.all(hosts.map((h) => h?.exited));
      await stream.dispose();
      await db.close();
    }
  }, 120_000);
});
