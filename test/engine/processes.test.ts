import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOncely, type Oncely } from '../../src/index.js';
import { crashWindows, recordingDownstream } from '../../src/testing/index.js';
import { dropDatabase, freshDatabase, MYSQL_URL } from '../support/mysql.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { connectRedis, dropPrefix, freshPrefix, REDIS_URL } from '../support/redis.js';
import { startWorker } from '../support/spawn.js';
import { openStore, type StoreSpec } from '../support/stores.js';
import type { KitCharge } from './support/kit-charge.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const KIT_CHARGE = fileURLToPath(new URL('./support/kit-charge.ts', import.meta.url));

/** A downstream (an SMS gateway, a payment provider) that dedupes on the key it is given, and logs every call. */
function makeSink(): { path: string; effects(key: string): number; calls(key: string): number } {
  const path = join(mkdtempSync(join(tmpdir(), 'oncely-sink-')), 'sink.db');
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.exec(`CREATE TABLE effects (idempotency_key TEXT PRIMARY KEY, done_by TEXT);
           CREATE TABLE calls (id INTEGER PRIMARY KEY, idempotency_key TEXT, done_by TEXT)`);
  db.close();
  const count = (sql: string, key: string) => {
    const reader = new Database(path, { readonly: true });
    const n = (reader.prepare(sql).get(key) as { n: number }).n;
    reader.close();
    return n;
  };
  return {
    path,
    effects: (key) => count('SELECT COUNT(*) AS n FROM effects WHERE idempotency_key = ?', key),
    calls: (key) => count('SELECT COUNT(*) AS n FROM calls WHERE idempotency_key = ?', key),
  };
}

/** The many-process promise, against one store: concurrency across processes, and kill -9 at each window. */
function describeProcesses(
  name: string,
  makeSpec: () => Promise<StoreSpec> | StoreSpec,
  cleanup?: () => Promise<void>,
) {
  describe(`across processes: ${name}`, () => {
    let spec: StoreSpec;
    let once: Oncely;
    beforeAll(async () => {
      spec = await makeSpec();
      once = await createOncely({ store: openStore(spec), tenant: 'acme' });
    });
    afterAll(async () => {
      await once.close();
      await cleanup?.();
    });

    it('4 processes x 50 concurrent calls of one key: one execution, waiters get the value', async () => {
      const action = `burst-${randomUUID().slice(0, 8)}`;
      const sink = makeSink();
      const workers = Array.from({ length: 4 }, () =>
        startWorker({ store: spec, mode: 'burst', action, key: 'ORD-1:sms', calls: 50, sink: sink.path }),
      );
      await Promise.all(workers.map((w) => w.waitFor('ready')));
      for (const w of workers) w.child.stdin.write('go\n');
      const reports = await Promise.all(
        workers.map(
          async (w) =>
            JSON.parse(await w.waitFor('{')) as {
              executed: number;
              outcomes: { kind: string; waited: boolean; value?: { by: number } }[];
            },
        ),
      );
      const outcomes = reports.flatMap((r) => r.outcomes);
      expect(reports.reduce((n, r) => n + r.executed, 0)).toBe(1);
      expect(sink.calls('ORD-1:sms')).toBe(1);
      expect(outcomes).toHaveLength(200);
      expect(outcomes.filter((o) => o.kind === 'executed')).toHaveLength(1);
      const winner = outcomes.find((o) => o.kind === 'executed')?.value?.by;
      for (const o of outcomes) {
        expect(['executed', 'replayed', 'IN_PROGRESS']).toContain(o.kind);
        if (o.waited) expect(o.kind === 'executed' || o.kind === 'replayed').toBe(true);
        if (o.kind === 'replayed') expect(o.value?.by).toBe(winner);
      }
      await Promise.all(workers.map((w) => w.exited));
    });

    it('kill -9 in the middle of a stream of completions loses no finished record', async () => {
      const action = `stream-${randomUUID().slice(0, 8)}`;
      const worker = startWorker({ store: spec, mode: 'stream', action, key: 'K' });
      await worker.waitFor('done 30');
      worker.child.kill('SIGKILL');
      await worker.exited;
      for (let i = 0; i <= 30; i++) {
        const r = await once.run({ action, key: `K-${i}` }, async () => ({ i: -1 }));
        expect(r).toMatchObject({ replayed: true, value: { i } });
      }
    });

    async function crash(options: { effect: boolean; policy: 'retry' | 'hold' }) {
      const action = `crash-${randomUUID().slice(0, 8)}`;
      const key = 'ORD-7:charge';
      const sink = makeSink();
      const lease = 600;
      const worker = startWorker({
        store: spec,
        mode: 'hang',
        action,
        key,
        lease,
        effect: options.effect,
        onLeaseExpired: options.policy,
        sink: sink.path,
      });
      await worker.waitFor(options.effect ? 'effect' : 'claimed');
      worker.child.kill('SIGKILL');
      expect((await worker.exited).signal).toBe('SIGKILL');
      const request = { action, key, lease, onLeaseExpired: options.policy };
      const retried: string[] = [];
      const fn = async (ctx: { idempotencyKey: string; attempt: number }) => {
        retried.push(ctx.idempotencyKey);
        await sleep(0);
        const db = new Database(sink.path);
        db.pragma('busy_timeout = 5000');
        db.prepare('INSERT OR IGNORE INTO effects (idempotency_key, done_by) VALUES (?, ?)').run(
          ctx.idempotencyKey,
          'retry',
        );
        db.prepare('INSERT INTO calls (idempotency_key, done_by) VALUES (?, ?)').run(ctx.idempotencyKey, 'retry');
        db.close();
        return { attempt: ctx.attempt };
      };
      // While the dead holder's lease lasts, nobody runs the action.
      await expect(once.run(request, fn)).rejects.toMatchObject({ code: 'IN_PROGRESS' });
      await sleep(lease + 100);
      return { request, fn, retried, sink, key };
    }

    it("kill -9 at each window under 'retry' (oncely/testing's crashWindows): a fresh process takes over with the same key, or replays; one effect each", async () => {
      const action = `crash-${randomUUID().slice(0, 8)}`;
      const gateway = await recordingDownstream();
      try {
        const report = await crashWindows({
          child: { module: KIT_CHARGE, export: 'charge' },
          parallel: true,
          input: (window): KitCharge => ({
            store: spec,
            action,
            key: `ORD-${window}:charge`,
            gateway: gateway.url,
            lease: 600,
            onLeaseExpired: 'retry',
          }),
          effects: (window) => gateway.effects.filter((e) => e.key === `ORD-${window}:charge`).length,
        });
        expect(report.cases.map((c) => [c.window, c.got, c.retry.attempts, c.effects])).toEqual([
          ['claimed', 'taken over', 2, 1],
          ['before-effect', 'taken over', 2, 1],
          ['after-effect', 'taken over', 2, 1],
          ['completed', 'replayed', 1, 1],
        ]);
        // Killed after its effect: the takeover posted the same key again, the downstream's dedupe held.
        expect(gateway.callsWith('ORD-after-effect:charge')).toBe(2);
        expect(gateway.callsWith('ORD-claimed:charge')).toBe(1);
        const record = await once.get(action, 'ORD-after-effect:charge');
        expect(record).toMatchObject({ state: 'succeeded', attempts: 2 });
      } finally {
        await gateway.close();
      }
    }, 60_000);

    it("kill -9 after the effect under 'hold': callers get OUTCOME_UNKNOWN until a person resolves it", async () => {
      const { request, fn, retried, sink, key } = await crash({ effect: true, policy: 'hold' });
      await expect(once.run(request, fn)).rejects.toMatchObject({ code: 'OUTCOME_UNKNOWN' });
      await expect(once.run(request, fn)).rejects.toMatchObject({ code: 'OUTCOME_UNKNOWN' });
      expect(retried).toEqual([]);
      expect(sink.effects(key)).toBe(1);
      await once.resolve(request.action, key, { value: { attempt: 1 } });
      expect(await once.run(request, fn)).toMatchObject({ replayed: true, value: { attempt: 1 } });
    });

    it("kill -9 after the claim under 'hold' and resolved with 'retry': the next caller executes once", async () => {
      const { request, fn, retried, sink, key } = await crash({ effect: false, policy: 'hold' });
      await expect(once.run(request, fn)).rejects.toMatchObject({ code: 'OUTCOME_UNKNOWN' });
      await once.resolve(request.action, key, 'retry');
      expect(await once.run(request, fn)).toMatchObject({ replayed: false, value: { attempt: 2 } });
      expect(retried).toEqual([key]);
      expect(sink.effects(key)).toBe(1);
    });
  });
}

/**
 * Processes whose clocks disagree, sharing one store that has a clock of its own (PostgreSQL,
 * Redis). SQLite is one host, one clock, so it is not among them.
 */
function describeClockSkew(name: string, makeSpec: () => StoreSpec, cleanup?: () => Promise<void>) {
  describe(`clock skew: ${name}`, () => {
    afterAll(async () => {
      await cleanup?.();
    });

    it('defect 11.10: a renewing 1 s lease is not taken over by a process whose clock runs 2 s ahead', async () => {
      const spec = makeSpec();
      const once = await createOncely({ store: openStore(spec), tenant: 'acme', defaults: { lease: '1s' } });
      const action = `skew-${randomUUID().slice(0, 8)}`;
      const probe = startWorker({
        store: spec,
        mode: 'probe',
        action,
        key: 'K-1',
        lease: 1_000,
        skewMs: 2_000,
        durationMs: 3_500,
      });
      await probe.waitFor('ready');
      let runs = 0;
      const holder = once.run({ action, key: 'K-1' }, async () => {
        runs++;
        // Three leases long, renewed every third of one: healthy throughout.
        await sleep(3_000);
        return 'held';
      });
      await sleep(50);
      probe.child.stdin.write('go\n');
      const counts = JSON.parse(await probe.waitFor('{')) as {
        executed: number;
        inProgress: number;
        replayed: number;
        other: string[];
      };
      expect((await holder).value).toBe('held');
      // Judged by the skewed clock, the holder's lease looked a second overdue all along.
      expect(counts).toMatchObject({ executed: 0, other: [] });
      expect(counts.inProgress).toBeGreaterThan(10);
      expect(counts.replayed).toBeGreaterThan(0);
      expect(runs).toBe(1);
      await probe.exited;
      await once.close();
    });
  });
}

/** One store each: where its processes meet, and how its leftovers are dropped after the suite. */
const stores: {
  name: string;
  spec: () => StoreSpec;
  cleanup?: () => Promise<void>;
  /** Only stores with a clock of their own (PostgreSQL, Redis, MySQL) run the clock-skew suite. */
  skew?: { spec: () => StoreSpec; cleanup: () => Promise<void> };
}[] = [
  {
    name: 'sqlite',
    spec: () => ({ kind: 'sqlite', path: join(mkdtempSync(join(tmpdir(), 'oncely-proc-')), 'shared.db') }),
  },
  (() => {
    const schema = freshSchema();
    const skewSchema = freshSchema();
    return {
      name: 'postgres',
      spec: (): StoreSpec => ({ kind: 'postgres', connectionString: POSTGRES_URL, schema }),
      cleanup: () => dropSchema(schema),
      skew: {
        spec: (): StoreSpec => ({ kind: 'postgres', connectionString: POSTGRES_URL, schema: skewSchema }),
        cleanup: () => dropSchema(skewSchema),
      },
    };
  })(),
  (() => {
    const prefix = freshPrefix();
    const skewPrefix = freshPrefix();
    const drop = (p: string) => async () => {
      const client = await connectRedis();
      await dropPrefix(client, p);
      await client.close();
    };
    return {
      name: 'redis',
      spec: (): StoreSpec => ({ kind: 'redis', url: REDIS_URL, prefix }),
      cleanup: drop(prefix),
      skew: {
        spec: (): StoreSpec => ({ kind: 'redis', url: REDIS_URL, prefix: skewPrefix }),
        cleanup: drop(skewPrefix),
      },
    };
  })(),
  (() => {
    const database = freshDatabase();
    const skewDatabase = freshDatabase();
    return {
      name: 'mysql',
      // The store creates its database when missing.
      spec: (): StoreSpec => ({ kind: 'mysql', uri: MYSQL_URL, database }),
      cleanup: () => dropDatabase(database),
      skew: {
        spec: (): StoreSpec => ({ kind: 'mysql', uri: MYSQL_URL, database: skewDatabase }),
        cleanup: () => dropDatabase(skewDatabase),
      },
    };
  })(),
];

for (const store of stores) {
  describeProcesses(store.name, store.spec, store.cleanup);
  if (store.skew) describeClockSkew(store.name, store.skew.spec, store.skew.cleanup);
}
