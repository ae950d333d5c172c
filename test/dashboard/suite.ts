/**
 * The dashboard in headless Chromium against a real `oncely serve` on one database: what the pages
 * show is what the database holds, and each action taken on a page (settle, replay, retry, approve)
 * has its effect once. Screenshots of every page go to test-results/dashboard/<db>-<page>.png.
 */
import { mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type StormReport, storm } from '../../examples/shop/storm.js';
import type { Db } from '../../src/db/types.js';
import { sleep } from '../support/host-app.js';
import { until } from '../support/wait.js';
import { launch } from './browser.js';
import {
  type AgentSide,
  CHARGE_KEY,
  CLI_KEY,
  cli,
  countsOf,
  DEAD_EVENT,
  DEAD_EVENT_2,
  ERROR_KEY,
  HELD_CREDITS,
  leaveUnknownCharge,
  makeData,
  openDb,
  post,
  RECONCILED_KEY,
  RETRY_KEY,
  type Serve,
  startServe,
  stopServe,
  TOKEN,
} from './serve.js';

/** Orders the shop storm makes: a few seconds of it, each order charged, paid and some refunded. */
const STORM_ORDERS = 4;
const SHOTS = join(process.cwd(), 'test-results', 'dashboard');

export function dashboardSuite(name: 'sqlite' | 'postgres', target: () => string, cleanup: () => Promise<void>) {
  describe(`the dashboard on ${name}`, () => {
    const db = target();
    const ledgerUp = join(mkdtempSync(join(tmpdir(), 'oncely-dash-')), 'ledger-up');
    let serve: Serve;
    let rows: Db;
    let browser: Browser;
    let page: Page;
    let side: AgentSide;
    let stormed: StormReport;
    const requested: string[] = [];
    const shot = (what: string) => page.screenshot({ path: join(SHOTS, `${name}-${what}.png`), fullPage: true });
    const text = async (selector: string) => (await page.locator(selector).innerText()).trim();
    /** Clicks a button that opens the confirmation, then confirms; waits for the status line. */
    const confirmClick = async (button: string, said: string | RegExp) => {
      await page.getByRole('button', { name: button, exact: true }).click();
      await page.locator('#confirm').waitFor();
      await page.locator('#confirm-ok').click();
      await page.locator('#status', { hasText: said }).waitFor();
    };

    beforeAll(async () => {
      mkdirSync(SHOTS, { recursive: true });
      rows = await openDb(db);
      // The shop storm first, on the same database: its hosts (examples/shop under `oncely serve`)
      // are killed with SIGKILL mid-call and mid-consumer, and every effect must still happen once.
      stormed = await storm(db, 2, STORM_ORDERS);
      expect(stormed.problems).toEqual([]);
      // The first serve migrates, claims the charge and dies; the one the browser uses starts after it.
      await leaveUnknownCharge(db, ledgerUp, rows);
      serve = await startServe(db, ledgerUp);
      side = await makeData(serve.base, rows, ledgerUp, db);
      browser = await launch();
      page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
      page.on('request', (r) => requested.push(r.url()));
      // Signed in as a person does: the form keeps the token (and the name for the audit) in this tab.
      await page.goto(`${serve.base}/oncely/`);
      await page.fill('#token', TOKEN);
      await page.fill('#operator', 'ada');
      await page.click('#login button[type=submit]');
      await page.locator('[data-rate=duplicateInterception]').waitFor();
    }, 120_000);
    afterAll(async () => {
      await browser?.close();
      await side?.close();
      await stopServe(serve);
      await rows?.close();
      await cleanup();
    });

    it('shows a wrong token nothing: every data call is 401 and no data is drawn', async () => {
      expect(serve.stdout).toContain(`dashboard:    ${serve.base}/oncely/  (asks for ONCELY_ADMIN_TOKEN)`);
      // The shell is public and holds no data; a same-origin-only policy keeps any other script out.
      const shell = await fetch(`${serve.base}/oncely/`);
      expect(shell.headers.get('content-security-policy')).toContain("default-src 'none'; script-src 'self'");
      expect(await shell.text()).toContain('data-api="/v1/admin"');
      const context = await browser.newContext();
      const stranger = await context.newPage();
      const calls: { url: string; status: number }[] = [];
      stranger.on('response', (r) => {
        if (r.url().includes('/v1/admin/')) calls.push({ url: r.url(), status: r.status() });
      });
      await stranger.goto(`${serve.base}/oncely/`);
      await stranger.locator('#login').waitFor();
      await stranger.fill('#token', 'not-the-token-0123456789');
      await stranger.click('#login button[type=submit]');
      await stranger.locator('#login-error', { hasText: 'Refused' }).waitFor();
      for (const hash of [
        '#records?state=unknown',
        '#events',
        '#flows',
        '#agent',
        `#record/${encodeURIComponent(`default/pay.charge/${CHARGE_KEY}`)}`,
      ]) {
        await stranger.goto(`${serve.base}/oncely/${hash}`);
        await stranger.locator('#login-error', { hasText: 'Refused' }).waitFor();
      }
      expect(calls.length).toBeGreaterThanOrEqual(6);
      expect(calls.every((c) => c.status === 401)).toBe(true);
      expect(await stranger.locator('main').innerText()).toBe('');
      const html = await stranger.content();
      for (const secret of ['ORD-', CHARGE_KEY, DEAD_EVENT, 'acme']) expect(html).not.toContain(secret);
      await stranger.screenshot({ path: join(SHOTS, `${name}-wrong-token.png`) });
      await context.close();
    });

    it('overview: the counts the database holds, the four rates with their targets, live updates', async () => {
      await page.goto(`${serve.base}/oncely/#overview`);
      await page.locator('[data-rate=duplicateInterception]').waitFor();
      for (const [prefix, table, column] of [
        ['records', 'oncely_records', 'state'],
        ['events', 'oncely_events', 'status'],
        ['flows', 'oncely_flows', 'status'],
        ['approvals', 'oncely_approvals', 'status'],
      ] as const) {
        const held = await countsOf(rows, table, column);
        expect(Object.keys(held).length, prefix).toBeGreaterThan(0);
        const shown: Record<string, number> = {};
        for (const dd of await page.locator(`[data-count^="${prefix}."]`).all())
          shown[((await dd.getAttribute('data-count')) as string).slice(prefix.length + 1)] = Number(
            await dd.innerText(),
          );
        expect(shown, prefix).toEqual(held);
      }
      // The storm's data is among them: its orders and charges, and its events (all applied or stale, none dead).
      const shop = await countsOf(
        rows,
        "oncely_records WHERE (action = 'POST orders.create' AND key LIKE 'create-%') OR action = 'POST payments.charge'",
        'action',
      );
      expect(shop).toEqual({ 'POST orders.create': STORM_ORDERS, 'POST payments.charge': STORM_ORDERS });
      const stormEvents = await countsOf(rows, "oncely_events WHERE source <> 'hooks'", 'status');
      expect(stormEvents).toEqual(stormed.outcomes);
      // The stats the page shows are the database's totals: the storm's deliveries and the fixture's 4 orders sent twice.
      const stats = (await (await fetch(`${serve.base}/v1/stats`)).json()).data;
      expect(stats.rateTotals.duplicates).toBeGreaterThanOrEqual(4);
      const rate = await text('[data-rate=duplicateInterception]');
      const interception = stats.rateTotals.duplicatesIntercepted / stats.rateTotals.duplicates;
      expect(rate).toContain(`${(interception * 100).toFixed(interception === 1 ? 0 : 2)}%`);
      expect(rate).toMatch(/target at least 99\.90%: (met|NOT met)/);
      expect(await page.locator('[data-rate] svg').count()).toBe(8);
      // The charts' history: the host sampled the totals within a second of its start.
      const series = await fetch(`${serve.base}/v1/admin/series?window=24h`, {
        headers: { authorization: `Bearer ${TOKEN}` },
      });
      const { samples } = (await series.json()).data;
      expect(samples.length).toBeGreaterThanOrEqual(1);
      expect(samples[0].at % 60_000).toBe(0);
      // How many duplicates were stopped this hour: the totals now less those of the hour's oldest sample.
      const hour = (
        await (
          await fetch(`${serve.base}/v1/admin/series?window=1h`, { headers: { authorization: `Bearer ${TOKEN}` } })
        ).json()
      ).data.samples;
      // (The storm's hosts sampled too, at their start; a retry after its host was killed may count as let through.)
      const stopped = stats.rateTotals.duplicatesIntercepted - hour[0].rateTotals.duplicatesIntercepted;
      const passed = stats.rateTotals.duplicates - hour[0].rateTotals.duplicates - stopped;
      expect(await text('[data-testid=stopped]')).toBe(
        `${stopped} duplicates stopped in the last hour, ${passed} let through`,
      );
      await shot('overview');
      // The keyboard's first stop is the skip link, then the pages.
      await page.keyboard.press('Tab');
      expect(await page.evaluate(() => document.activeElement?.textContent)).toBe('Skip to the content');
      await page.keyboard.press('Tab');
      expect(await page.evaluate(() => document.activeElement?.textContent)).toBe('Overview');
      const before = Number(await text('[data-count="records.succeeded"]'));
      // Live: a new order, sent twice, shows up without a reload, its duplicate stopped.
      for (let i = 0; i < 2; i++)
        await post(serve.base, '/v1/invoke/orders.create', { orderId: 'ORD-LIVE', sku: 'TEA-1' });
      await page
        .locator('[data-testid=stopped]', {
          hasText: `${stopped + 1} duplicates stopped in the last hour, ${passed} let through`,
        })
        .waitFor({ timeout: 12_000 });
      await page
        .locator('[data-count="records.succeeded"]', { hasText: String(before + 1) })
        .waitFor({ timeout: 12_000 });
      await page.setViewportSize({ width: 390, height: 844 });
      expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
      await shot('overview-phone');
      await page.setViewportSize({ width: 1280, height: 900 });
    });

    it("oncely records resolve settles a handler's record the same way: the next caller gets the value", async () => {
      const ref = `default/${encodeURIComponent('POST pay.charge')}/${CLI_KEY}`;
      await cli(['records', 'resolve', ref, '--db', db, '--value', '{"chargeId":"ch_cli"}', '--by', 'ops-cli']);
      const next = await post(
        serve.base,
        '/v1/invoke/pay.charge',
        { orderId: 'ORD-U2', hang: true },
        { 'idempotency-key': CLI_KEY },
      );
      expect([next.status, next.json.data]).toEqual([200, { chargeId: 'ch_cli' }]);
    });

    it('records: what the reconciler did, in the list and the detail; the next caller gets its value', async () => {
      await page.goto(`${serve.base}/oncely/#records?action=${encodeURIComponent('POST pay.capture')}`);
      const listed = page.locator('[data-testid=records] tbody tr', { hasText: RECONCILED_KEY });
      await listed.waitFor();
      expect(await listed.innerText()).toMatch(/succeeded\s+\d+\s+reconciler \(value\)/);
      await page.getByRole('link', { name: new RegExp(RECONCILED_KEY) }).click();
      await page.locator('main h2', { hasText: RECONCILED_KEY }).waitFor();
      const detail = await text('main');
      expect(detail).toContain('"by": "reconciler"');
      expect(detail).toContain('"answer": "value"');
      expect(detail).toContain(`"captureId": "cap_found_${RECONCILED_KEY}"`);
      // No settle form: the record is no longer unknown.
      expect(await page.locator('form.settle').count()).toBe(0);
      await shot('record-reconciled');
      const next = await post(
        serve.base,
        '/v1/invoke/pay.capture',
        { orderId: 'ORD-U3', hang: true },
        { 'idempotency-key': RECONCILED_KEY },
      );
      expect([next.status, next.json.data]).toEqual([200, { captureId: `cap_found_${RECONCILED_KEY}` }]);
    });

    it('records: filters to the unknown charges, shows a detail, and settling it with a value answers the next caller', async () => {
      await page.goto(`${serve.base}/oncely/#records`);
      await page.selectOption('#f-state', 'unknown');
      await page.getByRole('button', { name: 'Apply' }).click();
      const link = page.getByRole('link', { name: new RegExp(CHARGE_KEY) });
      await link.waitFor();
      // Drawn again with the filter: the unknown records alone (the database's count of them, each one unknown).
      await page.waitForFunction(() => location.hash.includes('state=unknown'));
      const unknown = Number((await countsOf(rows, 'oncely_records', 'state')).unknown);
      expect(unknown).toBe(3);
      await page.waitForFunction(
        (n) => document.querySelectorAll('[data-testid=records] tbody tr').length === n,
        unknown,
      );
      for (const tr of await page.locator('[data-testid=records] tbody tr').all())
        expect(await tr.innerText()).toMatch(/\tunknown\t/);
      // Every control has a label.
      for (const control of await page.locator('main input, main select').all())
        expect(await control.evaluate((el) => (el as HTMLInputElement).labels?.length ?? 0)).toBeGreaterThan(0);
      await shot('records');
      await link.click();
      await page.locator('form.settle').waitFor();
      const detail = await text('main');
      const [held] = await rows.all<{ fingerprint: string; trace_id: string; fence: number | string }>(
        'SELECT fingerprint, trace_id, fence FROM oncely_records WHERE key = ?',
        [CHARGE_KEY],
      );
      expect(detail).toContain(String(held?.fingerprint));
      expect(detail).toContain(String(held?.trace_id));
      // Request ids are per attempt and not stored: the detail says so beside the trace id, and where they are.
      expect(detail).toMatch(
        new RegExp(`traceId\\s+${held?.trace_id}\\s+requestIds\\s+not stored on the record: .*X-Request-Id`),
      );
      await page.fill('#s-value', '{"chargeId":"ch_settled_by_ada"}');
      await page.fill('#s-note', 'PSP ch_settled_by_ada');
      // A cancelled confirmation changes nothing.
      await page.getByRole('button', { name: 'Settle…' }).click();
      await page.locator('#confirm-cancel').click();
      await page.locator('#status', { hasText: 'Cancelled' }).waitFor();
      expect(
        (await rows.all<{ state: string }>('SELECT state FROM oncely_records WHERE key = ?', [CHARGE_KEY]))[0]?.state,
      ).toBe('unknown');
      await confirmClick('Settle…', 'Settled.');
      await shot('record');
      const next = await post(
        serve.base,
        '/v1/invoke/pay.charge',
        { orderId: 'ORD-U1', hang: true },
        { 'idempotency-key': CHARGE_KEY },
      ).catch((error) => {
        throw new Error(`${error.message}\n${serve.stderr()}`);
      });
      expect(next.status).toBe(200);
      expect(next.json.data).toEqual({ chargeId: 'ch_settled_by_ada' });
      // The detail shows the settlement and the stored result the caller was answered.
      const settled = await text('main');
      expect(settled).toContain('admin:token:ada');
      expect(settled).toContain('"chargeId": "ch_settled_by_ada"');
      // The list says who settled it.
      await page.goto(`${serve.base}/oncely/#records?action=${encodeURIComponent('POST pay.charge')}`);
      const listed = page.locator('[data-testid=records] tbody tr', { hasText: CHARGE_KEY });
      await listed.waitFor();
      expect(await listed.innerText()).toContain('admin:token:ada (value)');
    });

    it('records: settled from the page with an error (the next caller gets it) and with a retry (it runs again)', async () => {
      const settle = async (key: string, how: 'error' | 'retry', fill: () => Promise<void>) => {
        await page.goto(`${serve.base}/oncely/#record/${encodeURIComponent(`default/POST pay.charge/${key}`)}`);
        await page.locator('form.settle').waitFor();
        await page.check(`input[name=how][value=${how}]`);
        await fill();
        await confirmClick('Settle…', 'Settled.');
        const [held] = await rows.all<{ state: string }>('SELECT state FROM oncely_records WHERE key = ?', [key]);
        return held?.state;
      };
      const failed = await settle(ERROR_KEY, 'error', async () => {
        await page.fill('#s-message', 'declined at the PSP');
        await page.fill('#s-code', 'CARD_DECLINED');
      });
      expect(failed).toBe('failed');
      expect(await text('main')).toMatch(/"answer": "error"/);
      const declined = await post(
        serve.base,
        '/v1/invoke/pay.charge',
        { orderId: 'ORD-U4', hang: true },
        { 'idempotency-key': ERROR_KEY },
      );
      expect(declined.status).not.toBe(200);
      expect(declined.json.error).toMatchObject({ code: 'CARD_DECLINED', message: 'declined at the PSP' });
      // A retry releases the key: the next caller runs the charge (this time to its end).
      expect(await settle(RETRY_KEY, 'retry', async () => {})).toBe('released');
      const again = await post(
        serve.base,
        '/v1/invoke/pay.charge',
        { orderId: 'ORD-U5' },
        { 'idempotency-key': RETRY_KEY },
      );
      expect([again.status, again.json.data]).toEqual([200, { chargeId: 'ch_ORD-U5' }]);
      const [ran] = await rows.all<{ state: string; attempts: number | string }>(
        'SELECT state, attempts FROM oncely_records WHERE key = ?',
        [RETRY_KEY],
      );
      expect([ran?.state, Number(ran?.attempts)]).toEqual(['succeeded', 2]);
    });

    it('records: the tenant and age filters applied from the page list what the database holds', async () => {
      // A charge of another tenant (the app's tenant is the x-account header).
      const charged = await post(
        serve.base,
        '/v1/invoke/pay.charge',
        { orderId: 'ORD-T1' },
        { 'idempotency-key': 'ORD-T1-charge', 'x-account': 'tea-house' },
      );
      expect(charged.status).toBe(200);
      /** Fills the filters, applies them, and reads the rows of the table drawn again with them in the hash. */
      const apply = async (fields: { tenant?: string; olderThan?: string }) => {
        await page.fill('#f-tenant', fields.tenant ?? '');
        await page.fill('#f-olderThan', fields.olderThan ?? '');
        // The table drawn before is marked: the one to read is the next.
        await page.locator('[data-testid=records]').evaluate((el) => el.setAttribute('data-drawn-before', ''));
        await page.getByRole('button', { name: 'Apply' }).click();
        const drawn = page.locator('[data-testid=records]:not([data-drawn-before])');
        await drawn.waitFor();
        const hash = new URLSearchParams(await page.evaluate(() => location.hash.split('?')[1] ?? ''));
        expect(Object.fromEntries(hash)).toEqual(fields);
        return drawn.locator('tbody tr').allInnerTexts();
      };
      await page.goto(`${serve.base}/oncely/#records`);
      await page.locator('[data-testid=records]').waitFor();
      const [tenants] = await rows.all<{ n: number | string }>(
        "SELECT COUNT(*) AS n FROM oncely_records WHERE tenant = 'tea-house'",
      );
      expect(Number(tenants?.n)).toBe(1);
      const ofTenant = await apply({ tenant: 'tea-house' });
      expect(ofTenant).toHaveLength(1);
      expect(ofTenant[0]).toMatch(/^tea-house \/ POST pay\.charge \/ ORD-T1-charge\tsucceeded\t1\t/);
      // By age: nothing was written over an hour ago; once a second old, the charge is.
      const [old] = await rows.all<{ n: number | string }>(
        'SELECT COUNT(*) AS n FROM oncely_records WHERE updated_at <= ?',
        [Date.now() - 3_600_000],
      );
      expect(Number(old?.n)).toBe(0);
      expect(await apply({ olderThan: '1h' })).toEqual(['none']);
      expect(await apply({ tenant: 'tea-house', olderThan: '1h' })).toEqual(['none']);
      // sleep: the charge must be a second old for the 1s filter to list it
      await sleep(1_100);
      const aged = await apply({ tenant: 'tea-house', olderThan: '1s' });
      expect(aged).toHaveLength(1);
      expect(aged[0]).toContain('ORD-T1-charge');
      expect(await page.locator('#f-olderThan').inputValue()).toBe('1s');
      await shot('records-tenant-age');
    });

    it('events: dead letters with their last error and attempts; replayed from the page one, then all, each applied once', async () => {
      await page.goto(`${serve.base}/oncely/#events`);
      const dead = page.locator('[data-testid=dead-letters] tbody tr', { hasText: DEAD_EVENT });
      await dead.waitFor();
      expect(await dead.innerText()).toContain('the ledger is down');
      expect(await dead.innerText()).toMatch(/\t1\t/);
      await shot('events');
      const applied = () =>
        rows.all<{ n: number | string }>("SELECT COUNT(*) AS n FROM applied WHERE event_id = 'ORD-D'");
      expect(Number((await applied())[0]?.n)).toBe(0);
      await confirmClick(`Replay ${DEAD_EVENT}`, 'Replayed 1.');
      await until(
        `the replayed ${DEAD_EVENT} to apply`,
        () =>
          rows.all<{ status: string; last_error: string }>(
            'SELECT status, last_error FROM oncely_events WHERE event_id = ?',
            [DEAD_EVENT],
          ),
        (r) => r[0]?.status === 'applied',
      );
      expect(Number((await applied())[0]?.n)).toBe(1);
      expect(await page.locator('[data-testid=dead-letters] tbody tr', { hasText: DEAD_EVENT }).count()).toBe(0);
      // Replay all: the one left is applied once too, the first not again.
      const appliedTo = async (orderId: string) =>
        Number(
          (await rows.all<{ n: number | string }>('SELECT COUNT(*) AS n FROM applied WHERE event_id = ?', [orderId]))[0]
            ?.n,
        );
      expect(await appliedTo('ORD-D2')).toBe(0);
      await confirmClick('Replay all dead letters', 'Replayed 1.');
      await until(
        `${DEAD_EVENT_2}, replayed with all, to apply`,
        () => rows.all<{ status: string }>('SELECT status FROM oncely_events WHERE event_id = ?', [DEAD_EVENT_2]),
        (r) => r[0]?.status === 'applied',
      );
      expect([await appliedTo('ORD-D'), await appliedTo('ORD-D2')]).toEqual([1, 1]);
      await page.reload();
      await page.locator('[data-testid=dead-letters] tbody tr', { hasText: 'none' }).waitFor();
    });

    it('flows: the failed flow as a timeline with its step keys and error; retried from the page; signals with who', async () => {
      await page.goto(`${serve.base}/oncely/#flows?status=failed`);
      const [failed] = await rows.all<{ workflow_id: string }>(
        "SELECT workflow_id FROM oncely_flows WHERE status = 'failed'",
      );
      const id = String(failed?.workflow_id);
      await page.getByRole('link', { name: id }).click();
      const steps = page.locator('[data-testid=steps]');
      await steps.waitFor();
      const before = await steps.innerText();
      expect(before).toMatch(/reserve completed, executed in run 1, compensated/);
      expect(before).toMatch(/compensate:reserve compensation completed, executed in run 1/);
      expect(before).toMatch(/label failed, retried \(2 attempts\)/);
      expect(before).toContain('NO_PAPER');
      await shot('flow');
      await confirmClick('Retry from the failed step', 'Retried.');
      await until(
        'the retried flow to complete',
        () => rows.all<{ status: string }>('SELECT status FROM oncely_flows WHERE workflow_id = ?', [id]),
        (r) => r[0]?.status === 'completed',
      );
      // The completed step was memoized, not run again: its row is still the first run's, and the page says so.
      const [reserve] = await rows.all<{ attempts: number | string; run: number | string }>(
        "SELECT attempts, run FROM oncely_flow_steps WHERE workflow_id = ? AND step_id = 'reserve'",
        [id],
      );
      const [after] = await rows.all<{ runs: number | string }>('SELECT runs FROM oncely_flows WHERE workflow_id = ?', [
        id,
      ]);
      expect(Number(reserve?.attempts)).toBe(1);
      expect(Number(reserve?.run)).toBe(1);
      expect(Number(after?.runs)).toBeGreaterThan(1);
      await page.reload();
      await steps.waitFor();
      await until(
        'the timeline to show the label step completed',
        () => steps.innerText(),
        (text) => text.includes('label completed'),
      );
      const resumed = await steps.innerText();
      expect(resumed).toMatch(/reserve completed, memoized \(stored by run 1, not run again\), compensated/);
      expect(resumed).toMatch(new RegExp(`label completed, executed in run ${Number(after?.runs)}`));
      await shot('flow-retried');
      const [review] = await rows.all<{ workflow_id: string }>(
        "SELECT workflow_id FROM oncely_flows WHERE name = 'review'",
      );
      await page.goto(`${serve.base}/oncely/#flow/${encodeURIComponent(String(review?.workflow_id))}`);
      const signals = page.locator('[data-testid=signals] tbody tr', { hasText: 'sig-ORD-4' });
      await signals.waitFor();
      expect(await signals.innerText()).toContain('"by": "ada"');
      await page.goto(`${serve.base}/oncely/#flows`);
      await page.locator('[data-testid=flows]').waitFor();
      await shot('flows');
    });

    it("agent: the pending approval with its preview and hash, a held call's open reservation with its credits (filtered by account); approved from the page, the tool sends once", async () => {
      await page.goto(`${serve.base}/oncely/#agent`);
      const [pending] = await rows.all<{ id: string; content_hash: string }>(
        "SELECT id, content_hash FROM oncely_approvals WHERE status = 'pending'",
      );
      const approval = page.locator('[data-testid=approvals] tbody tr', { hasText: 'notifyCustomer' });
      await approval.waitFor();
      expect(await approval.innerText()).toContain('Your tea has shipped.');
      expect(await approval.innerText()).toContain(String(pending?.content_hash));
      // A pending approval holds no credits (they are reserved when the tool runs): none is open yet.
      expect(await text('[data-testid=credits]')).toMatch(/acme\s+25\s+0/);
      expect(await text('[data-testid=reservations] tbody')).toBe('none');
      // A held tool call: its credits are reserved while its execute runs.
      const held = side.hold('ORD-2');
      const open = await until(
        "the held call's credit reservation",
        () =>
          rows.all<{ action_id: string; credits: number | string; life: string }>(
            "SELECT action_id, credits, life FROM oncely_credit_reservations WHERE status = 'reserved'",
          ),
        (r) => r.length === 1,
      );
      const [reservation] = open;
      const [holder] = await rows.all<{ key: string; tenant: string; state: string }>(
        'SELECT key, tenant, state FROM oncely_records WHERE trace_id = ?',
        [reservation?.life],
      );
      expect(Number(reservation?.credits)).toBe(HELD_CREDITS);
      await page.reload();
      const listed = page.locator('[data-testid=reservations] tbody tr', { hasText: String(reservation?.action_id) });
      await listed.waitFor();
      const cells = await listed.locator('td').allInnerTexts();
      expect(cells.slice(0, 5)).toEqual([
        'acme',
        String(HELD_CREDITS),
        `${holder?.tenant} / summarizeOrder / ${holder?.key}`,
        reservation?.action_id,
        `in_progress, trace ${reservation?.life}`,
      ]);
      expect(holder?.state).toBe('in_progress');
      // The account's line says the same: 25 granted, 3 held.
      expect(await text('[data-testid=credits]')).toMatch(
        new RegExp(`acme\\s+${25 - HELD_CREDITS}\\s+${HELD_CREDITS}`),
      );
      // Every control has a label; at phone width the page with the reservation fits 390 px.
      for (const control of await page.locator('main input, main select').all())
        expect(await control.evaluate((el) => (el as HTMLInputElement).labels?.length ?? 0)).toBeGreaterThan(0);
      await shot('agent');
      await page.setViewportSize({ width: 390, height: 844 });
      expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
      await shot('agent-reservations-phone');
      await page.setViewportSize({ width: 1280, height: 900 });
      // Filtered by account from the page: acme's reservation, then none of another account.
      for (const [account, shown] of [
        ['acme', String(reservation?.action_id)],
        ['nobody', 'none'],
      ] as const) {
        await page.fill('#f-account', account);
        await page.getByRole('button', { name: 'Apply' }).click();
        await page.waitForFunction((a) => location.hash.includes(`account=${a}`), account);
        await page.locator('[data-testid=reservations] caption', { hasText: `of ${account}` }).waitFor();
        expect(await text('[data-testid=reservations] tbody')).toContain(shown);
        expect(await page.locator('[data-testid=reservations] tbody tr').count()).toBe(1);
      }
      // The call ends: its reservation is confirmed, no longer open, and the account keeps the charge.
      side.release();
      expect((await held).deliveryState).toBe('sent');
      await page.goto(`${serve.base}/oncely/#agent`);
      // Drawn again for all accounts (the page before showed another's: 'none' too).
      await page
        .locator('[data-testid=reservations] caption', { hasText: /^Open credit reservations, newest first$/ })
        .waitFor();
      expect(await text('[data-testid=reservations] tbody')).toBe('none');
      expect(await text('[data-testid=credits]')).toMatch(new RegExp(`acme\\s+${25 - HELD_CREDITS}\\s+0`));
      await approval.waitFor();
      await confirmClick(`Approve ${pending?.id}`, 'Approved.');
      const [decided] = await rows.all<{ status: string; decided_by: string }>(
        'SELECT status, decided_by FROM oncely_approvals WHERE id = ?',
        [pending?.id],
      );
      expect(decided).toEqual({ status: 'approved', decided_by: 'admin:token:ada' });
      // Every change made from the pages is in the audit the overview lists, with who made it.
      await page.goto(`${serve.base}/oncely/#overview`);
      await page.locator('[data-testid=audit] tbody tr', { hasText: 'approvals.approve' }).waitFor();
      const audit = await text('[data-testid=audit]');
      for (const action of ['records.resolve', 'events.replay', 'flows.retry', 'approvals.approve'])
        expect(audit, audit).toMatch(new RegExp(`token:ada\\s+${action.replace('.', '\\.')}\\s+\\S+\\s+done`));
      await shot('overview-after');
      expect(side.sent).toEqual([]);
      const sends = [
        await side.agent.call('notifyCustomer', side.args),
        await side.agent.call('notifyCustomer', side.args),
      ];
      expect(sends.map((s) => s.deliveryState)).toEqual(['sent', 'already_sent']);
      expect(side.sent).toEqual(['ORD-1']);
      // Offline: every request the pages made, on every page, went to the serve itself.
      expect(requested.length).toBeGreaterThan(20);
      expect(requested.filter((url) => !url.startsWith(`${serve.base}/`))).toEqual([]);
    });

    it('phone width: every page and detail fits 390 px without sideways scrolling', async () => {
      const [flow] = await rows.all<{ workflow_id: string }>(
        "SELECT workflow_id FROM oncely_flows WHERE name = 'ship'",
      );
      await page.setViewportSize({ width: 390, height: 844 });
      try {
        for (const [hash, ready] of [
          ['#records', '[data-testid=records]'],
          [`#record/${encodeURIComponent(`default/POST pay.charge/${CHARGE_KEY}`)}`, 'main dl.fields'],
          ['#events', '[data-testid=events]'],
          ['#flows', '[data-testid=flows]'],
          [`#flow/${encodeURIComponent(String(flow?.workflow_id))}`, '[data-testid=steps]'],
          ['#agent?status=approved', '[data-testid=approvals]'],
        ] as const) {
          await page.goto(`${serve.base}/oncely/${hash}`);
          await page.locator(ready).waitFor();
          expect(await page.evaluate(() => document.documentElement.scrollWidth), hash).toBeLessThanOrEqual(390);
        }
        await shot('agent-phone');
      } finally {
        await page.setViewportSize({ width: 1280, height: 900 });
      }
    });
  });
}
