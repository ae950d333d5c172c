/**
 * Flows operated from the CLI with `--db` alone (no app folder), and a failed flow reported in one
 * line by default, as a failed consumer is.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { OncelyLogger } from '../../src/core/observer.js';
import { type Db, openDb } from '../../src/db/index.js';
import { createFlows, defineFlow, type Flows } from '../../src/flows/index.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { selectStores } from '../support/store-filter.js';
import { until } from '../support/wait.js';
import { oncely } from './support/cli.js';

const DATABASES = selectStores([
  {
    name: 'sqlite',
    fresh: async () => ({ target: join(mkdtempSync(join(tmpdir(), 'oncely-cli-')), 'app.db'), drop: async () => {} }),
  },
  {
    name: 'postgres',
    fresh: async () => {
      const schema = freshSchema();
      return { target: `${POSTGRES_URL}?schema=${schema}`, drop: () => dropSchema(schema) };
    },
  },
] as const);

for (const database of DATABASES)
  describe(`flows from the CLI on ${database.name}`, () => {
    const cleanups: (() => Promise<void>)[] = [];
    afterEach(async () => {
      vi.restoreAllMocks();
      for (const c of cleanups.splice(0).reverse()) await c();
    });
    const fresh = async () => {
      const { target, drop } = await database.fresh();
      cleanups.push(drop);
      const db: Db = await openDb(target);
      cleanups.push(() => db.close());
      return { target, db };
    };

    it('review3.16: oncely flows list, show, retry and cancel --db <target> work without an app folder', async () => {
      const { target, db } = await fresh();
      let courier = false;
      const tag = randomUUID().slice(0, 8);
      const ship = defineFlow(`ship-${tag}`, { seed: ['order'] }, async (run, _input: { order: string }) =>
        run.step(
          'ship',
          () => {
            if (!courier) throw new Error('no courier');
            return 'shipped';
          },
          { retry: { attempts: 1 } },
        ),
      );
      const approve = defineFlow(`approve-${tag}`, { seed: ['order'] }, async (run, _input: { order: string }) =>
        run.waitFor('approval'),
      );
      const flows: Flows = await createFlows({ db, flows: [ship, approve], poll: '20ms', metrics: false });
      cleanups.push(() => flows.stop());
      await flows.startWorker();
      const failed = (await flows.start(ship, { order: 'ORD-1' })).workflowId;
      const waiting = (await flows.start(approve, { order: 'ORD-1' })).workflowId;
      await until('a failed and a waiting flow', async () => {
        const [a, b] = await Promise.all([flows.get(failed), flows.get(waiting)]);
        return a?.status === 'failed' && b?.status === 'waiting';
      });

      const listed = await oncely('flows', 'list', '--db', target);
      expect(listed).toMatchObject({ code: 0, stderr: '' });
      expect(listed.stdout).toContain(`${failed}\tfailed\truns 1\tSTEP_ERROR: step ship failed: no courier`);
      expect(listed.stdout).toContain(`${waiting}\twaiting\truns 1\t`);
      const onlyFailed = await oncely('flows', 'list', '--db', target, '--status', 'failed', '--json');
      expect(JSON.parse(onlyFailed.stdout).map((f: { workflowId: string }) => f.workflowId)).toEqual([failed]);
      const shown = JSON.parse((await oncely('flows', 'show', failed, '--db', target)).stdout);
      expect(shown.steps).toMatchObject([{ stepId: 'ship', status: 'failed', attempts: 1, run: 1 }]);

      // Refusals say why, exit 1, and change nothing.
      const notFailed = await oncely('flows', 'retry', waiting, '--db', target);
      expect(notFailed.code).toBe(1);
      expect(notFailed.stderr).toContain(`flow ${waiting} is waiting: only a failed flow is retried`);
      const notWaiting = await oncely('flows', 'cancel', failed, '--db', target);
      expect(notWaiting.code).toBe(1);
      expect(notWaiting.stderr).toContain(`flow ${failed} is failed: only a pending or waiting flow is cancelled`);
      for (const verb of ['show', 'retry', 'cancel']) {
        const missing = await oncely('flows', verb, 'nope-1', '--db', target);
        expect([verb, missing.code, missing.stderr.trim()]).toEqual([verb, 1, 'oncely: no flow nope-1']);
      }

      courier = true;
      const retried = await oncely('flows', 'retry', failed, '--db', target);
      expect(retried).toMatchObject({ code: 0, stdout: `${failed} resumes from its failed step\n` });
      expect(await flows.result(failed, { timeout: '10s' })).toBe('shipped');
      const cancelled = await oncely('flows', 'cancel', waiting, '--db', target);
      expect(cancelled).toMatchObject({ code: 0, stdout: `${waiting} is cancelled\n` });
      expect((await flows.get(waiting))?.status).toBe('cancelled');
    }, 60_000);

    it('review3.16: a failed flow is one line on stderr by default, and the logger’s one line when there is a logger', async () => {
      const { db } = await fresh();
      const written: string[] = [];
      vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
        written.push(String(chunk));
        return true;
      });
      const tag = randomUUID().slice(0, 8);
      const def = defineFlow(`pay-${tag}`, { seed: ['order'] }, async (run, _input: { order: string }) =>
        run.step(
          'charge',
          () => {
            throw Object.assign(new Error('card declined\nby the issuer'), { code: 'DECLINED' });
          },
          { retry: { attempts: 1 } },
        ),
      );
      const quiet = await createFlows({ db, flows: [def], poll: '20ms', metrics: false });
      cleanups.push(() => quiet.stop());
      await quiet.startWorker();
      const { workflowId } = await quiet.start(def, { order: 'ORD-1' });
      await expect(quiet.result(workflowId, { timeout: '10s' })).rejects.toMatchObject({ code: 'FLOW_FAILED' });
      const line = `oncely: flow failed: flow ${workflowId}, run 1; oncely flows retry ${workflowId} resumes it: Error DECLINED: step charge failed: card declined by the issuer\n`;
      await until('the failure line', async () => written.includes(line));
      expect(written.filter((w) => w.includes('flow failed'))).toEqual([line]);
      await quiet.stop();

      // With a logger, its one error line (the flow_failed decision), and nothing on stderr.
      written.length = 0;
      const errors: { fields: Record<string, unknown>; message: string }[] = [];
      const noop = () => undefined;
      const logger: OncelyLogger = {
        info: noop,
        warn: noop,
        error: (fields, message) => errors.push({ fields: fields as Record<string, unknown>, message }),
      };
      const logged = await createFlows({ db, flows: [def], poll: '20ms', metrics: false, logger });
      cleanups.push(() => logged.stop());
      await logged.startWorker();
      const second = (await logged.start(def, { order: 'ORD-2' })).workflowId;
      await expect(logged.result(second, { timeout: '10s' })).rejects.toMatchObject({ code: 'FLOW_FAILED' });
      await until('the logger line', async () => errors.length > 0);
      expect(errors).toMatchObject([{ message: 'oncely flow flow_failed', fields: { key: second } }]);
      expect(written.filter((w) => w.includes('flow failed'))).toEqual([]);
    });

    it('review3.16: --db names a missing database, or one with no flows, in one line', async () => {
      const missing = join(mkdtempSync(join(tmpdir(), 'oncely-cli-')), 'nope.db');
      const gone = await oncely('flows', 'list', '--db', missing);
      expect([gone.code, gone.stderr]).toEqual([1, `oncely: no database at ${missing}\n`]);
      if (database.name !== 'sqlite') return;
      const empty = join(mkdtempSync(join(tmpdir(), 'oncely-cli-')), 'empty.db');
      writeFileSync(empty, '');
      const bare = await oncely('flows', 'list', '--db', empty);
      expect([bare.code, bare.stderr]).toEqual([
        1,
        `oncely: no oncely flows in ${empty}: run oncely migrate or serve on it first\n`,
      ]);
    });
  });
