import { execFile } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Host } from '../../src/host/index.js';
import { openHost, signStandardWebhook } from '../../src/host/index.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { until } from '../support/wait.js';

const FIXTURE = fileURLToPath(new URL('./fixture', import.meta.url));
const SECRET = 'whsec_dGVzdC1maXh0dXJlLXNlY3JldC1rZXk=';
const run = promisify(execFile);

const schema = freshSchema();
afterAll(() => dropSchema(schema));
const targets: [string, () => string][] = [
  ['sqlite', () => join(mkdtempSync(join(tmpdir(), 'oncely-host-')), 'app.db')],
  ['postgres', () => `${POSTGRES_URL}?schema=${schema}`],
];

for (const [name, makeTarget] of targets)
  describe(`host on ${name}`, () => {
    let host: Host;
    let target: string;
    let base: string;
    beforeAll(async () => {
      target = makeTarget();
      host = await openHost(FIXTURE, target);
      base = `http://127.0.0.1:${await host.start(0)}`;
    });
    afterAll(() => host.stop());

    const invoke = async (handler: string, body: unknown, key?: string, headers: Record<string, string> = {}) => {
      const res = await fetch(`${base}/v1/invoke/${handler}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}), ...headers },
        body: JSON.stringify(body),
      });
      return {
        status: res.status,
        replayed: res.headers.get('idempotent-replayed'),
        body: (await res.json()) as Record<string, unknown>,
      };
    };
    const count = async (sql: string, params: unknown[] = []) => {
      const db = await import('../../src/db/index.js').then((m) => m.openDb(target));
      try {
        return Number((await db.all<{ n: number | string }>(sql, params))[0]?.n);
      } finally {
        await db.close();
      }
    };
    const hook = (id: string, body: string, secret = SECRET, at = Math.floor(Date.now() / 1000)) =>
      fetch(`${base}/v1/webhooks/hooks`, {
        method: 'POST',
        body,
        headers: {
          'webhook-id': id,
          'webhook-timestamp': String(at),
          'webhook-signature': signStandardWebhook(secret, id, at, body),
        },
      });

    it('answers invocations in the envelope and replays them by key', async () => {
      const first = await invoke('notes.create', { body: 'hello' }, '"note-1"');
      expect(first).toMatchObject({ status: 200, replayed: null, body: { code: 0, data: { id: expect.any(String) } } });
      const again = await invoke('notes.create', { body: 'hello' }, '"note-1"');
      // The replay is the first answer, its envelope naming the request that ran (README "Handlers").
      expect(again).toMatchObject({ status: 200, replayed: 'true', body: first.body });
      expect(await invoke('notes.create', { body: 'other' }, '"note-1"')).toMatchObject({
        status: 422,
        body: { code: 422, error: { code: 'KEY_REUSED' } },
      });
      expect(await invoke('notes.create', { body: 'x' })).toMatchObject({
        status: 400,
        body: { error: { code: 'KEY_REQUIRED' } },
      });
      expect(await invoke('notes.nope', {}, 'k')).toMatchObject({
        status: 404,
        body: { error: { code: 'HANDLER_UNKNOWN' } },
      });
      expect(await count('SELECT COUNT(*) AS n FROM notes')).toBe(1);
    });

    it('commits the record, the store writes and the outbox rows together, or none of them', async () => {
      const failed = await invoke('notes.create', { body: 'doomed', fail: true }, '"note-2"');
      expect(failed).toMatchObject({ status: 409, body: { code: 409, error: { code: 'ASKED_TO_FAIL' } } });
      expect(await count(`SELECT COUNT(*) AS n FROM notes WHERE body = 'doomed'`)).toBe(0);
      expect(await count(`SELECT COUNT(*) AS n FROM oncely_records WHERE key = 'note-2'`)).toBe(0);
      const outboxBefore = await count('SELECT COUNT(*) AS n FROM oncely_outbox');
      const retried = await invoke('notes.create', { body: 'doomed', fail: false }, '"note-2"');
      expect(retried).toMatchObject({ status: 200, replayed: null });
      expect(await count('SELECT COUNT(*) AS n FROM oncely_outbox')).toBe(outboxBefore + 1);
    });

    it('defect 11.7: a result that is not JSON (a bigint) is 500 RESULT_NOT_SERIALIZABLE, rolled back, key free', async () => {
      for (let attempt = 0; attempt < 2; attempt++)
        expect(await invoke('notes.counted', { body: 'counted' }, '"counted-1"')).toMatchObject({
          status: 500,
          replayed: null,
          body: { error: { code: 'RESULT_NOT_SERIALIZABLE' } },
        });
      expect(await count(`SELECT COUNT(*) AS n FROM notes WHERE body = 'counted'`)).toBe(0);
      expect(await count(`SELECT COUNT(*) AS n FROM oncely_records WHERE key = 'counted-1'`)).toBe(0);
    });

    it('delivers outbox rows to consumers once, with the outbox id as the event id', async () => {
      const { body } = await invoke('notes.create', { body: 'relay me' }, '"note-3"');
      await invoke('notes.create', { body: 'relay me' }, '"note-3"');
      const noteId = (body.data as { id: string }).id;
      const notified = await until(
        'the outbox row delivered to its consumer',
        () => count('SELECT COUNT(*) AS n FROM notified WHERE note_id = ?', [noteId]),
        (n) => n > 0,
      );
      expect(notified).toBe(1);
      expect(await count('SELECT COUNT(*) AS n FROM oncely_outbox WHERE payload LIKE ?', [`%${noteId}%`])).toBe(1);
      const eventIds = await count(
        'SELECT COUNT(*) AS n FROM notified JOIN oncely_outbox ON oncely_outbox.id = notified.event_id WHERE notified.note_id = ?',
        [noteId],
      );
      expect(eventIds).toBe(1);
    });

    it('builds keys from declared fields, validates input, and never invents a key', async () => {
      const a = await invoke('notes.by-fields', { noteId: 'n1', revision: 3 });
      const b = await invoke('notes.by-fields', { noteId: 'n1', revision: 3 });
      expect(a.body.data).toEqual({ key: 'n1:3', runs: expect.any(Number) });
      expect([b.replayed, b.body]).toEqual(['true', a.body]);
      expect(await invoke('notes.by-fields', { noteId: 'n1' })).toMatchObject({
        status: 400,
        body: { error: { code: 'KEY_REQUIRED' } },
      });
      expect(await invoke('notes.validated', { n: 'two' }, 'v1')).toMatchObject({
        status: 400,
        body: { error: { code: 'INPUT_INVALID' } },
      });
      expect(await invoke('notes.validated', { n: 2 }, 'v1')).toMatchObject({
        status: 200,
        body: { data: { double: 4 } },
      });
      expect(await invoke('notes.peek', {})).toMatchObject({ status: 400, body: { error: { code: 'KEY_REQUIRED' } } });
      expect(await invoke('notes.peek', {}, 'p1')).toMatchObject({ status: 200, body: { data: { key: 'p1' } } });
    });

    it('verifies webhooks, stores nothing it refuses, and acknowledges duplicates as such', async () => {
      const body = JSON.stringify({ type: 'note.unhandled', data: {} });
      expect((await hook('evt-bad', body, 'whsec_b3RoZXItc2VjcmV0')).status).toBe(401);
      expect((await hook('evt-old', body, SECRET, Math.floor(Date.now() / 1000) - 600)).status).toBe(401);
      expect((await hook('evt-junk', 'not json')).status).toBe(400);
      expect(
        await count(`SELECT COUNT(*) AS n FROM oncely_events WHERE event_id IN ('evt-bad', 'evt-old', 'evt-junk')`),
      ).toBe(0);
      const first = await hook('evt-1', body);
      const again = await hook('evt-1', body);
      expect([first.status, again.status]).toEqual([200, 200]);
      expect(await first.json()).toMatchObject({ data: { outcome: 'accepted', duplicate: false } });
      expect(await again.json()).toMatchObject({ data: { outcome: 'duplicate', duplicate: true } });
      const push = () =>
        fetch(`${base}/v1/webhooks/gh`, {
          method: 'POST',
          body: '{"ref":"main"}',
          headers: { 'x-github-delivery': 'gh-delivery-1', 'x-github-event': 'push' },
        });
      expect((await push()).status).toBe(200);
      expect((await push()).status).toBe(200);
      await until(
        'the push consumed',
        () => count(`SELECT COUNT(*) AS n FROM pushes`),
        (n) => n > 0,
      );
      // sleep: a window in which the duplicate delivery must not be consumed as well.
      await new Promise((r) => setTimeout(r, 100));
      expect(await count(`SELECT COUNT(*) AS n FROM pushes WHERE event_id = 'gh-delivery-1'`)).toBe(1);
    });

    it('starts flows in the handler transaction, runs them in the host, and lists and retries them from the CLI', async () => {
      const rolledBack = await invoke('notes.create', { body: 'flow doomed', flow: true, fail: true }, '"flow-0"');
      expect(rolledBack.status).toBe(409);
      expect(await count(`SELECT COUNT(*) AS n FROM oncely_flows`)).toBe(0);
      const ok = await invoke('notes.create', { body: 'flow ok', flow: true }, '"flow-1"');
      const noteId = (ok.body.data as { id: string }).id;
      expect(await host.flows?.result(`welcome-${noteId}`, { timeout: '10s' })).toEqual({
        key: `welcome-${noteId}:greet`,
      });
      const bad = await invoke('notes.create', { body: 'flow fails', flow: true, failFlow: true }, '"flow-2"');
      const badId = `welcome-${(bad.body.data as { id: string }).id}`;
      await expect(host.flows?.result(badId, { timeout: '10s' })).rejects.toMatchObject({ code: 'FLOW_FAILED' });
      const cli = (...args: string[]) => run(process.execPath, ['dist/cli/main.js', ...args]);
      const listed = await cli('flows', 'list', FIXTURE, '--db', target, '--status', 'failed');
      expect(listed.stdout).toContain(badId);
      const retried = await cli('flows', 'retry', badId, '--dir', FIXTURE, '--db', target);
      expect(retried.stdout).toContain('resumes from its failed step');
      expect((await host.flows?.show(badId))?.steps.map((s) => s.stepId)).toContain('greet');
    });

    it('dead-letters a failing consumer and replays it with the same id from the CLI', async () => {
      await hook('evt-flaky', JSON.stringify({ type: 'note.flaky', data: {} }));
      const dead = async () => (await host.events.deadLetters()).filter((d) => d.eventId === 'evt-flaky');
      expect(await until('the failing event dead-lettered', dead, (d) => d.length > 0)).toMatchObject([
        {
          source: 'hooks',
          eventId: 'evt-flaky',
          attempts: 2,
          lastError: expect.stringContaining('downstream is down'),
        },
      ]);
      const cli = (...args: string[]) => run(process.execPath, ['dist/cli/main.js', ...args]);
      const listed = await cli('events', 'dead', 'list', FIXTURE, '--db', target);
      expect(listed.stdout).toContain('hooks/evt-flaky');
      const replayed = await cli('events', 'dead', 'replay', 'hooks/evt-flaky', '--dir', FIXTURE, '--db', target);
      expect(replayed.stdout).toContain('replayed 1 event');
      // The replay runs the consumer again under the same event id; it fails again and is dead again.
      const again = await until('the replayed event dead-lettered again', dead, (d) => d[0]?.attempts === 2);
      expect(again[0]).toMatchObject({ eventId: 'evt-flaky', attempts: 2 });
      // Counted in the transaction that dead-lettered it.
      expect((await host.events.stats()).dead_lettered).toBeGreaterThanOrEqual(2);
    });
  });
