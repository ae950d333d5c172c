/**
 * review3.1 from outside: a real `oncely serve` (the built CLI: `npm run build` first) with no
 * ONCELY_ADMIN_TOKEN, on SQLite and PostgreSQL. What a page of another site can send (a form, JSON
 * with its Origin, Sec-Fetch-Site) and the curl line without a body are refused, and the failed
 * flow and the pending approval are unchanged in the database; so are they after Chromium opened
 * pages of another site and of another port of this one that post a form and fetch; the README's
 * curl lines (JSON `{}`) retry and approve.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ServeProcess, startServeProcess } from '../../examples/shop/serve-process.js';
import { requestApproval } from '../../src/agent/approvals.js';
import { migrateAgentTables } from '../../src/agent/tables.js';
import { openDb } from '../../src/db/index.js';
import type { Db } from '../../src/db/types.js';
import { defineFlow } from '../../src/flows/define.js';
import { createFlows } from '../../src/flows/flows.js';
import { launch } from '../dashboard/browser.js';
import { hostTargets } from '../support/host-app.js';
import { until } from '../support/wait.js';

const curl = promisify(execFile);
const FLOWS = pathToFileURL(fileURLToPath(new URL('../../dist/flows/index.js', import.meta.url))).href;

/** An app whose one flow fails at its first step, for good. */
function app(): string {
  const dir = mkdtempSync(join(tmpdir(), 'oncely-admin-serve-'));
  mkdirSync(join(dir, 'flows'));
  writeFileSync(join(dir, 'package.json'), '{ "type": "module" }\n');
  writeFileSync(
    join(dir, 'flows', 'pay.ts'),
    `import { defineFlow } from ${JSON.stringify(FLOWS)};
export default defineFlow('pay', { seed: ['id'] }, async (run) =>
  run.step('charge', () => { throw new Error('psp down'); }, { retry: { attempts: 1 } }),
);\n`,
  );
  return dir;
}

/**
 * A page of another site, as a developer might open while the host runs: it posts a form with no
 * fields (an empty body, which the admin API took as `{}` before review3.1) to `form`, posts to
 * `opaque` without a body nor CORS, and fetches `json` with JSON, which needs a CORS preflight
 * first. Its title says when all three have settled.
 */
function attackPage(targets: { form: string; opaque: string; json: string }): string {
  return `<!doctype html><title>waiting</title>
<form id="f" method="POST" action="${targets.form}" target="sink"></form>
<iframe name="sink" id="sink"></iframe>
<script>
const done = [];
const settle = (what) => { done.push(what); if (done.length === 3) document.title = 'settled: ' + done.sort().join(', '); };
document.getElementById('sink').addEventListener('load', () => settle('form'), { once: true });
document.getElementById('f').submit();
fetch(${JSON.stringify(targets.opaque)}, { method: 'POST', mode: 'no-cors' })
  .then(() => settle('opaque'), () => settle('opaque'));
fetch(${JSON.stringify(targets.json)}, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' })
  .then(() => settle('json answered'), () => settle('json blocked'));
</script>`;
}

describe.each(hostTargets())('review3.1: oncely serve without a token on $name', ({ target: makeTarget, cleanup }) => {
  const target = makeTarget();
  let serve: ServeProcess;
  let db: Db;
  let workflowId: string;

  beforeAll(async () => {
    const env = { ...process.env };
    delete env.ONCELY_ADMIN_TOKEN;
    serve = await startServeProcess(app(), target, env);
    db = await openDb(target);
    // Started from here, run (and failed) by the serve's worker.
    const flows = await createFlows({ db, flows: [] });
    const pay = defineFlow('pay', { seed: ['id'] }, async () => undefined);
    workflowId = (await flows.start(pay, { id: 'B1' })).workflowId;
    await until(
      'the serve to fail the flow',
      () => flows.get(workflowId),
      (f) => f?.status === 'failed',
      { timeoutMs: 20_000 },
    );
    await migrateAgentTables(db);
    await requestApproval(db, {
      id: 'ap-1',
      tenant: 'default',
      tool: 'send_email',
      idempotencyKey: 'mail-1',
      contentHash: 'h',
      input: { to: 'x@example.com' },
      preview: { subject: 'hi' },
      requestedAt: Date.now(),
      expiresAt: Date.now() + 600_000,
    });
  });
  afterAll(async () => {
    await db?.close();
    if (serve && serve.child.exitCode === null) {
      const exited = new Promise((r) => serve.child.once('exit', r));
      serve.child.kill('SIGTERM');
      await exited;
    }
    await cleanup();
  });

  /** The flow's status and runs, and the approval's status and decider, as the database holds them. */
  const held = async () => {
    const [flow] = await db.all<{ status: string; runs: number | string }>(
      'SELECT status, runs FROM oncely_flows WHERE workflow_id = ?',
      [workflowId],
    );
    const [approval] = await db.all<{ status: string; decided_by: string | null }>(
      'SELECT status, decided_by FROM oncely_approvals WHERE id = ?',
      ['ap-1'],
    );
    return { flow: [flow?.status, Number(flow?.runs)], approval: [approval?.status, approval?.decided_by] };
  };
  /** One curl call: its HTTP status and JSON answer. */
  const call = async (path: string, args: string[]) => {
    const { stdout } = await curl('curl', ['-s', '-w', '\n%{http_code}', ...args, `${serve.url}/v1/admin/${path}`]);
    const lines = stdout.trimEnd().split('\n');
    const status = Number(lines.pop());
    return { status, json: JSON.parse(lines.join('\n')) };
  };

  it('refuses what a page of another site sends, and the bodiless curl line; nothing changes', async () => {
    const before = await held();
    expect(before).toEqual({ flow: ['failed', 1], approval: ['pending', null] });
    const json = ['-H', 'Content-Type: application/json', '-d', '{}'];
    const refused: [string, string[], number, string][] = [
      // A form another site's page posts: text/plain, its Origin and Sec-Fetch-Site with it.
      [
        `flows/${workflowId}/retry`,
        [
          '-H',
          'Origin: http://evil.example',
          '-H',
          'Sec-Fetch-Site: cross-site',
          '-H',
          'Content-Type: text/plain',
          '-d',
          '{}',
        ],
        403,
        'ADMIN_CROSS_SITE',
      ],
      ['approvals/ap-1/approve', ['-H', 'Origin: http://evil.example', ...json], 403, 'ADMIN_CROSS_SITE'],
      ['approvals/ap-1/approve', ['-H', 'Sec-Fetch-Site: same-site', ...json], 403, 'ADMIN_CROSS_SITE'],
      ['approvals/ap-1/reject', ['-H', 'Sec-Fetch-Site: cross-site', ...json], 403, 'ADMIN_CROSS_SITE'],
      [
        'approvals/ap-1/approve',
        ['-H', 'Content-Type: application/x-www-form-urlencoded', '-d', 'a=1'],
        415,
        'ADMIN_JSON_REQUIRED',
      ],
      // The README's old lines: no body, no type.
      [`flows/${workflowId}/retry`, ['-X', 'POST'], 415, 'ADMIN_JSON_REQUIRED'],
      ['approvals/ap-1/approve', ['-X', 'POST', '-H', 'Content-Type: application/json'], 400, 'BODY_INVALID'],
    ];
    for (const [path, args, status, code] of refused) {
      const res = await call(path, args);
      expect([res.status, res.json.error?.code], `${path} ${args.join(' ')}`).toEqual([status, code]);
    }
    expect(await held()).toEqual(before);
  });

  it('refuses what Chromium sends from pages of another site and of another port of this host', async () => {
    const before = await held();
    const admin = `${serve.url}/v1/admin`;
    const targets = {
      form: `${admin}/approvals/ap-1/approve`,
      opaque: `${admin}/flows/${workflowId}/retry`,
      json: `${admin}/approvals/ap-1/reject`,
    };
    const evil: Server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/html' }).end(attackPage(targets));
    });
    await new Promise<void>((resolve) => evil.listen(0, '127.0.0.1', resolve));
    const port = (evil.address() as AddressInfo).port;
    const browser = await launch();
    try {
      // 127.0.0.1 is another site than localhost; localhost on another port is the same site, another host.
      for (const origin of [`http://127.0.0.1:${port}`, `http://localhost:${port}`]) {
        const page = await browser.newPage();
        const seen: string[] = [];
        page.on('response', (r) => {
          if (r.url().startsWith(admin))
            seen.push(`${r.request().method()} ${r.url().slice(admin.length)} ${r.status()}`);
        });
        await page.goto(`${origin}/`);
        await page.waitForFunction(() => document.title.startsWith('settled'), undefined, { timeout: 20_000 });
        // The form and the opaque fetch reached the host and were answered 403. The JSON fetch needs a
        // preflight (Chromium sends it itself, unseen by the page's events); answered without CORS
        // headers, the browser never sent its POST.
        expect(await page.title(), origin).toBe('settled: form, json blocked, opaque');
        expect(seen.sort(), origin).toEqual(
          ['POST /approvals/ap-1/approve 403', `POST /flows/${workflowId}/retry 403`].sort(),
        );
        await page.close();
      }
    } finally {
      await browser.close();
      await new Promise((resolve) => evil.close(resolve));
    }
    expect(await held()).toEqual(before);
  });

  it("takes the README's curl lines: JSON {} retries the flow and approves the approval", async () => {
    const json = ['-H', 'Content-Type: application/json', '-d', '{}'];
    const retried = await call(`flows/${workflowId}/retry`, json);
    expect([retried.status, retried.json.data?.workflowId]).toEqual([200, workflowId]);
    const approved = await call('approvals/ap-1/approve', json);
    expect([approved.status, approved.json.data?.status]).toEqual([200, 'approved']);
    // Run again by the serve's worker (and failed again: its step always fails).
    const after = await until(
      'the retried flow to have run a second time',
      held,
      (h) => h.flow[0] === 'failed' && h.flow[1] === 2,
      { timeoutMs: 20_000 },
    );
    expect(after.approval).toEqual(['approved', 'admin:loopback']);
  });
});
