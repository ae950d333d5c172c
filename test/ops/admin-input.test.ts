/**
 * What the admin API refuses, on a listening host (SQLite and PostgreSQL): bad queries, refs and
 * bodies answered with the catalogue's codes (never a 500), and audited when they were changes;
 * and, on SQLite, a resolve beside a handler's open transaction waiting its turn in the Db's queue.
 */
import { randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrateAgentTables } from '../../src/agent/tables.js';
import { encodeCursor } from '../../src/core/cursor.js';
import { recordRef } from '../../src/core/record.js';
import { openDb } from '../../src/db/index.js';
import { migrate } from '../../src/db/migrate.js';
import { migrateFlowTables } from '../../src/flows/tables.js';
import { duplicatesMigrations } from '../../src/ops/duplicates.js';
import { sqliteStore } from '../../src/sqlite/index.js';
import { hostTargets, type RunningHost, sleep, startHost } from '../support/host-app.js';

const TOKEN = randomBytes(24).toString('hex');
// biome-ignore lint/suspicious/noExplicitAny: answers are JSON read field by field, as the README documents them.
type Json = any;

describe.each(hostTargets())('admin input on $name', ({ target: makeTarget, cleanup }) => {
  const target = makeTarget();
  let running: RunningHost;
  /** One admin request with the token (unless `token` says otherwise), answered as status, headers and JSON. */
  const call = async (
    method: string,
    path: string,
    options: { body?: unknown; raw?: string; token?: string | null; operator?: string; type?: string } = {},
  ) => {
    const headers: Record<string, string> = {};
    if (options.token !== null) headers.authorization = `Bearer ${options.token ?? TOKEN}`;
    if (options.operator !== undefined) headers['x-oncely-operator'] = options.operator;
    // Every change sends a JSON body, {} where it has no fields.
    const given = options.body ?? (method === 'POST' && options.raw === undefined ? {} : undefined);
    const body = options.raw ?? (given === undefined ? undefined : JSON.stringify(given));
    if (body !== undefined) headers['content-type'] = options.type ?? 'application/json';
    const res = await fetch(`${running.base}/v1/admin/${path}`, { method, headers, body });
    return { status: res.status, headers: res.headers, json: (await res.json()) as Json };
  };

  beforeAll(async () => {
    running = await startHost(target, {}, { host: { adminToken: TOKEN } });
  });
  afterAll(async () => {
    await running?.stop();
    await cleanup();
  });

  it('refuses bad input with the catalogue codes, never a 500', async () => {
    const ref = encodeURIComponent(recordRef({ tenant: 'default', action: 'charge', key: 'never-made' }));
    const cases: [string, string, Parameters<typeof call>[2], number, string][] = [
      ['GET', 'records?limit=0', {}, 400, 'INVALID_ARGUMENT'],
      ['GET', 'records?limit=1001', {}, 400, 'INVALID_ARGUMENT'],
      ['GET', 'records?limit=ten', {}, 400, 'INVALID_ARGUMENT'],
      ['GET', 'records?state=lost', {}, 400, 'INVALID_ARGUMENT'],
      ['GET', 'records?staet=unknown', {}, 400, 'INVALID_ARGUMENT'],
      ['GET', 'records?limit=1&limit=2', {}, 400, 'INVALID_ARGUMENT'],
      ['GET', 'records?olderThan=soon', {}, 400, 'INVALID_ARGUMENT'],
      ['GET', 'records?cursor=bm90LW91cnM', {}, 400, 'CURSOR_INVALID'],
      ['GET', 'events?cursor=bm90LW91cnM', {}, 400, 'CURSOR_INVALID'],
      ['GET', 'events?status=gone', {}, 400, 'INVALID_ARGUMENT'],
      ['GET', 'flows?status=done', {}, 400, 'INVALID_ARGUMENT'],
      ['GET', 'approvals?status=maybe', {}, 400, 'INVALID_ARGUMENT'],
      ['GET', 'audit?limit=-1', {}, 400, 'INVALID_ARGUMENT'],
      ['GET', 'records/not-a-ref', {}, 400, 'INVALID_ARGUMENT'],
      ['GET', `records/${ref}`, {}, 404, 'NOT_FOUND'],
      ['POST', `records/${ref}/resolve`, { body: { retry: true } }, 404, 'NOT_FOUND'],
      ['POST', `records/${ref}/resolve`, { raw: '{"value":' }, 400, 'BODY_INVALID'],
      ['POST', `records/${ref}/resolve`, { body: [1] }, 400, 'BODY_INVALID'],
      ['POST', `records/${ref}/resolve`, { body: { value: 1, retry: true } }, 400, 'INVALID_ARGUMENT'],
      ['POST', `records/${ref}/resolve`, { body: {} }, 400, 'INVALID_ARGUMENT'],
      ['POST', `records/${ref}/resolve`, { body: { retry: 'yes' } }, 400, 'INVALID_ARGUMENT'],
      ['POST', `records/${ref}/resolve`, { body: { error: { message: '' } } }, 400, 'INVALID_ARGUMENT'],
      ['POST', `records/${ref}/resolve`, { body: { error: { message: 'x', code: 'lower' } } }, 400, 'INVALID_ARGUMENT'],
      ['POST', `records/${ref}/resolve`, { body: { value: 1, colour: 'red' } }, 400, 'INVALID_ARGUMENT'],
      ['POST', `records/${ref}/resolve`, { body: { value: 1 }, type: 'text/plain' }, 415, 'ADMIN_JSON_REQUIRED'],
      ['POST', `records/${ref}/resolve`, { raw: '' }, 400, 'BODY_INVALID'],
      ['POST', 'flows/pay-F1/cancel', { body: {}, type: 'application/jsonp' }, 415, 'ADMIN_JSON_REQUIRED'],
      ['POST', `records/${ref}/resolve`, { body: { retry: true }, operator: 'tab\there' }, 400, 'INVALID_ARGUMENT'],
      ['POST', 'events/dead/replay', { body: { source: 'shop' } }, 400, 'INVALID_ARGUMENT'],
      ['POST', 'events/dead/replay', { body: { all: true, source: 'shop' } }, 400, 'INVALID_ARGUMENT'],
      ['POST', 'flows/pay-F1/retry', { body: { force: true } }, 400, 'INVALID_ARGUMENT'],
      ['POST', 'approvals/ap-1/approve', { body: { reason: 'no reason on approve' } }, 400, 'INVALID_ARGUMENT'],
      ['GET', 'nowhere', {}, 404, 'NOT_FOUND'],
      ['DELETE', 'records', {}, 404, 'NOT_FOUND'],
    ];
    const wrong: string[] = [];
    for (const [method, path, options, status, code] of cases) {
      const res = await call(method, path, options);
      if (res.status !== status || res.json.error?.code !== code || res.json.code !== status)
        wrong.push(`${method} ${path}: ${res.status} ${JSON.stringify(res.json)}`);
    }
    expect(wrong).toEqual([]);
    // A body declared over the host's 1 MiB cap is refused before a byte of it is read.
    const tooLarge = await new Promise<{ status: number; body: Json }>((resolve, reject) => {
      const req = request(
        `${running.base}/v1/admin/records/${ref}/resolve`,
        {
          method: 'POST',
          headers: {
            authorization: `Bearer ${TOKEN}`,
            'content-type': 'application/json',
            'content-length': String(2 * 1024 * 1024),
          },
        },
        (res) => {
          let text = '';
          res.on('data', (d) => {
            text += d;
          });
          res.on('end', () => {
            req.destroy();
            resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) });
          });
        },
      );
      req.on('error', reject);
      req.flushHeaders();
    });
    expect(tooLarge).toMatchObject({ status: 413, body: { error: { code: 'REQUEST_TOO_LARGE' } } });
    // A refused change is still audited: someone tried.
    const [refused] = await running.rows<{ n: number | string }>(
      "SELECT COUNT(*) AS n FROM oncely_admin_actions WHERE action = 'records.resolve' AND outcome = 'refused'",
    );
    // Ten refused bodies, one missing record, one body over the cap; a bad operator header is refused
    // at the door with the identity check, before a row could name who asked.
    expect(Number(refused?.n)).toBe(12);
  });

  it("review3.6: a NUL or other control character in any listing's cursor or filter is a 400 of the catalogue, never a database failure", async () => {
    // Every listed table exists, so each query would reach the database.
    const db = await openDb(target);
    try {
      await migrateAgentTables(db);
      await migrateFlowTables(db);
      await migrate(db, duplicatesMigrations);
    } finally {
      await db.close();
    }
    const nul = '\u0000';
    const cursor = (position: unknown[]) => `cursor=${encodeCursor(position)}`;
    // Each listing's own cursor shape, with a NUL in a text part.
    const cursors: [string, string][] = [
      ['records', cursor(['default', 'charge', `K${nul}1`])],
      ['events', cursor([1, 'shop', `evt${nul}`])],
      ['events/dead', cursor([1, `sh${nul}op`, 'evt-1'])],
      ['flows', cursor([1, `pay-${nul}`])],
      ['approvals', cursor([1, `ap${nul}`])],
      ['credits', cursor([`acct${nul}`])],
      ['credits/reservations', cursor([1, `act${nul}`])],
      ['duplicates', cursor(['ledger', `["O-1${nul}"]`])],
      ['audit', cursor([`1${nul}`])],
      ['records', 'cursor=%00'],
      ['events', 'cursor=a%00b'],
    ];
    const filters = [
      'records?action=ch%00arge',
      'records?tenant=%00',
      'records?tenant=acme%01',
      'records?action=%09charge',
      'records?state=%00',
      'records?olderThan=1%00',
      'records?limit=1%00',
      'events?status=dead%00',
      'events?source=shop%00',
      'events/dead?source=%00',
      'flows?status=%00failed',
      'approvals?status=pending%00',
      'credits/reservations?account=acct%00',
      'duplicates?table=ledger%00',
      'series?window=1h%00',
      'audit?limit=%00',
    ];
    const wrong: string[] = [];
    for (const [path, query] of cursors) {
      const res = await call('GET', `${path}?${query}`);
      if (res.status !== 400 || res.json.error?.code !== 'CURSOR_INVALID')
        wrong.push(`${path}?${query}: ${res.status} ${JSON.stringify(res.json)}`);
    }
    for (const path of filters) {
      const res = await call('GET', path);
      if (res.status !== 400 || res.json.error?.code !== 'INVALID_ARGUMENT')
        wrong.push(`${path}: ${res.status} ${JSON.stringify(res.json)}`);
    }
    // Ids in paths and the text of bodies: a NUL there reached the database the same way.
    const refOf = (tenant: string, key: string) => encodeURIComponent(recordRef({ tenant, action: 'charge', key }));
    for (const [path, body, code] of [
      [`records/${refOf('default', `K${nul}1`)}`, undefined, 'KEY_INVALID'],
      [`records/${refOf(`t${nul}`, 'K-1')}`, undefined, 'INVALID_ARGUMENT'],
      [`records/${refOf('default', `K${nul}1`)}/resolve`, { retry: true }, 'KEY_INVALID'],
      [`records/${refOf('default', 'K-1')}/resolve`, { retry: true, note: `a${nul}` }, 'INVALID_ARGUMENT'],
      [`records/${refOf('default', 'K-1')}/resolve`, { error: { message: `a${nul}` } }, 'INVALID_ARGUMENT'],
      ['flows/pay%00/retry', {}, 'INVALID_ARGUMENT'],
      ['approvals/ap%00/approve', {}, 'INVALID_ARGUMENT'],
      ['approvals/ap-1/reject', { reason: `no${nul}` }, 'INVALID_ARGUMENT'],
      ['events/dead/replay', { source: 'shop', id: `evt${nul}` }, 'INVALID_ARGUMENT'],
    ] as const) {
      const res = await call(body === undefined ? 'GET' : 'POST', path, body === undefined ? {} : { body });
      if (res.status !== 400 || res.json.error?.code !== code)
        wrong.push(`${path} ${JSON.stringify(body)}: ${res.status} ${JSON.stringify(res.json)}`);
    }
    expect(wrong).toEqual([]);
    // Text of several lines is text: a note may hold a newline.
    const lines = await call('POST', `records/${refOf('default', 'K-2')}/resolve`, {
      body: { retry: true, note: 'line 1\nline 2' },
    });
    expect([lines.status, lines.json.error?.code]).toEqual([404, 'NOT_FOUND']);
  });
});

// SQLite's one writer is the point; not registered when ONCELY_STORES leaves SQLite out.
describe.each(hostTargets().filter((t) => t.name === 'sqlite'))(
  'the admin API beside an open handler transaction on $name',
  ({ target: makeTarget }) => {
    it('settles a record while a handler holds its transaction open; the handler commits all it wrote', async () => {
      const target = makeTarget();
      let entered!: () => void;
      const inside = new Promise<void>((resolve) => {
        entered = resolve;
      });
      const running = await startHost(
        target,
        {
          schemaSql: 'CREATE TABLE IF NOT EXISTS marks (id TEXT PRIMARY KEY, note TEXT NOT NULL)',
          handlers: {
            'work.slow': {
              async handle(_input, ctx) {
                await ctx.store.createIfAbsent('marks', { id: 'before', note: 'x' }, ['id']);
                entered();
                // sleep: the transaction stays open this long; the resolve arrives meanwhile and waits its turn
                await sleep(600);
                await ctx.store.createIfAbsent('marks', { id: 'after', note: 'x' }, ['id']);
                return { ok: true };
              },
            },
          },
        },
        { host: { adminToken: TOKEN } },
      );
      // A claim whose holder died ten minutes ago, planted through a connection of the test's own.
      const records = sqliteStore({ path: target });
      try {
        const at = Date.now() - 600_000;
        const id = { tenant: 'default', action: 'charge', key: 'ORD-S' };
        await records.insertOrGet({
          ...id,
          state: 'in_progress',
          fingerprint: 'f',
          fence: 1,
          attempts: 1,
          leaseUntil: at + 30_000,
          result: null,
          traceId: 't-1',
          createdAt: at,
          updatedAt: at,
          completedAt: null,
          expiresAt: null,
        });
        const started = performance.now();
        const handler = running.invoke('work.slow', {}, { 'idempotency-key': 'S-1' });
        await inside;
        const resolved = await fetch(`${running.base}/v1/admin/records/${encodeURIComponent(recordRef(id))}/resolve`, {
          method: 'POST',
          headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
          body: JSON.stringify({ retry: true }),
        });
        expect(resolved.status).toBe(200);
        expect(((await resolved.json()) as Json).data).toMatchObject({ state: 'released' });
        expect((await handler).status).toBe(200);
        // The resolve waited its turn in the Db's queue: the handler was not held up past its own 600 ms.
        // Generous for a loaded CI: a handler shut out by the writes would run into its 30 s timeout.
        expect(performance.now() - started).toBeLessThan(8_000);
        expect(await running.rows('SELECT id FROM marks ORDER BY id')).toEqual([{ id: 'after' }, { id: 'before' }]);
        expect(await records.get(id)).toMatchObject({ state: 'released', settlement: { by: 'admin:token' } });
      } finally {
        await records.close();
        await running.stop();
      }
    });
  },
);
