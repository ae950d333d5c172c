import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { openDb } from '../../src/db/index.js';
import type { Db } from '../../src/db/types.js';
import { createFlows, defineFlow } from '../../src/flows/index.js';

describe('flows when the database fails mid-run', () => {
  it('suspends instead of failing the flow, and a worker resumes it from its stored steps', async () => {
    const real = await openDb(join(mkdtempSync(join(tmpdir(), 'oncely-flow-db-')), 'flows.db'));
    let failNext = false;
    // The database refuses one write: the one that stores step b's result.
    const db: Db = {
      ...real,
      transaction: (fn) => real.transaction(fn),
      exec: (script) => real.exec(script),
      close: () => real.close(),
      all: (sql, params) => real.all(sql, params),
      run: (sql, params) => {
        if (failNext && sql.includes("status = 'completed'") && params?.includes('b')) {
          failNext = false;
          return Promise.reject(new Error('disk I/O error'));
        }
        return real.run(sql, params);
      },
    };
    const runs: string[] = [];
    let compensated = 0;
    const flow = defineFlow('blink', { seed: ['id'] }, async (run, _input: { id: string }) => {
      await run.step('a', (s) => runs.push(s.idempotencyKey), { compensate: () => compensated++ });
      await run.step('b', (s) => runs.push(s.idempotencyKey));
      return 'done';
    });
    const flows = await createFlows({ db, flows: [flow], lease: 300, poll: 50 });
    failNext = true;
    await flows.startWorker();
    const { workflowId } = await flows.start(flow, { id: 'x' });
    expect(await flows.result(workflowId, { timeout: '10s' })).toBe('done');
    const shown = await flows.show(workflowId);
    expect(shown?.runs).toBe(2);
    expect(compensated).toBe(0);
    // Step a ran once (stored); b ran again with the same key after the blink.
    expect(runs).toEqual(['blink-x:a', 'blink-x:b', 'blink-x:b']);
    await flows.close();
  });
});
