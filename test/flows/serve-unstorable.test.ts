/**
 * review3.2 from outside: a real `oncely serve` (the built CLI: `npm run build` first) on SQLite and
 * PostgreSQL runs a flow whose step has its effect, then returns a value JSON cannot hold (a BigInt).
 * The step is kept as a RESULT_NOT_SERIALIZABLE failure, the admin API shows it, and a retry through
 * the admin API fails the flow again at that step without running its effect a second time: the
 * effect, counted in a file the app writes, happened once.
 */
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ServeProcess, startServeProcess } from '../../examples/shop/serve-process.js';
import { defineFlow } from '../../src/flows/define.js';
import { hostTargets } from '../support/host-app.js';
import { until } from '../support/wait.js';

const FLOWS = pathToFileURL(fileURLToPath(new URL('../../dist/flows/index.js', import.meta.url))).href;
const HOST = pathToFileURL(fileURLToPath(new URL('../../dist/host/index.js', import.meta.url))).href;

/** An app with a handler that starts `export`, whose one step appends to `effects` and returns a BigInt. */
function app(effects: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'oncely-serve-unstorable-'));
  mkdirSync(join(dir, 'flows'));
  mkdirSync(join(dir, 'handlers', 'exports'), { recursive: true });
  writeFileSync(join(dir, 'package.json'), '{ "type": "module" }\n');
  writeFileSync(
    join(dir, 'flows', 'export.ts'),
    `import { appendFileSync } from 'node:fs';
import { defineFlow } from ${JSON.stringify(FLOWS)};
export default defineFlow('export', { seed: ['id'] }, async (run, input: { id: string }) =>
  run.step('count', () => {
    appendFileSync(${JSON.stringify(effects)}, input.id + '\\n');
    return 10n ** 20n;
  }),
);\n`,
  );
  writeFileSync(
    join(dir, 'handlers', 'exports', 'start.ts'),
    `import type { HostContext } from ${JSON.stringify(HOST)};
import flow from '../../flows/export.js';
export async function handle(input: { id: string }, ctx: HostContext) {
  return ctx.flows.start(flow, input);
}\n`,
  );
  return dir;
}

// The same definition the app loads, for its name and seed: the workflow id is built from them.
const exportFlow = defineFlow('export', { seed: ['id'] }, async () => undefined);

describe.each(hostTargets())('review3.2: oncely serve on $name', ({ target: makeTarget, cleanup }) => {
  const effects = join(mkdtempSync(join(tmpdir(), 'oncely-effects-')), 'effects.txt');
  let serve: ServeProcess;

  beforeAll(async () => {
    writeFileSync(effects, '');
    serve = await startServeProcess(app(effects), makeTarget(), { ...process.env });
  });
  afterAll(async () => {
    if (serve && serve.child.exitCode === null) {
      const exited = new Promise((r) => serve.child.once('exit', r));
      serve.child.kill('SIGTERM');
      await exited;
    }
    await cleanup();
  });

  const admin = async (path: string, init?: RequestInit) => {
    const res = await fetch(`${serve.url}/v1/admin/${path}`, init);
    return { status: res.status, body: (await res.json()) as { data?: Record<string, unknown> } };
  };
  const flowOf = async (id: string) =>
    (await admin(`flows/${id}`)).body.data as
      | { status: string; runs: number; steps: { stepId: string; status: string; error?: { code?: string } }[] }
      | undefined;
  const ran = () => readFileSync(effects, 'utf8').split('\n').filter(Boolean);

  it('a step whose result is a BigInt is failed and kept; a retry does not run its effect again', async () => {
    const started = await fetch(`${serve.url}/v1/invoke/exports.start`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': 'export-E1' },
      body: JSON.stringify({ id: 'E1' }),
    });
    expect(started.status).toBe(200);
    const { workflowId } = ((await started.json()) as { data: { workflowId: string } }).data;
    expect(workflowId).toBe(`${exportFlow.name}-E1`);

    const failed = await until(
      'the serve to fail the flow at its step',
      () => flowOf(workflowId),
      (f) => f?.status === 'failed',
      { timeoutMs: 20_000 },
    );
    expect(failed?.steps).toEqual([
      expect.objectContaining({
        stepId: 'count',
        status: 'failed',
        error: expect.objectContaining({ code: 'RESULT_NOT_SERIALIZABLE' }),
      }),
    ]);
    expect(ran()).toEqual(['E1']);

    const retried = await admin(`flows/${workflowId}/retry`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    expect(retried.status).toBe(200);
    const again = await until(
      'the retried flow to fail again',
      () => flowOf(workflowId),
      (f) => f?.status === 'failed' && f.runs >= 2,
      { timeoutMs: 20_000 },
    );
    expect(again?.steps.map((s) => [s.stepId, s.status, s.error?.code])).toEqual([
      ['count', 'failed', 'RESULT_NOT_SERIALIZABLE'],
    ]);
    // The effect ran once: the retry found the kept failure and did not call the step.
    expect(ran()).toEqual(['E1']);
  });
});
