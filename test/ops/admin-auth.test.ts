/**
 * Who the admin API answers, on a listening host (SQLite and PostgreSQL): with a token, only the
 * bearer of it (401 for a missing or wrong one); with none, only clients on loopback (403 for a
 * request to the machine's own non-loopback address, or one naming another host), counted as denied.
 */
import { request } from 'node:http';
import { networkInterfaces } from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { serveBanner } from '../../src/cli/serve-banner.js';
import { routeIndex } from '../../src/host/routes.js';
import { adminToken, isLoopback } from '../../src/ops/admin-auth.js';
import { hostTargets, type RunningHost, startHost } from '../support/host-app.js';

const TOKEN = 'admin-token-0123456789abcdef';
// biome-ignore lint/suspicious/noExplicitAny: answers are JSON read field by field.
type Json = any;

/** This machine's first non-loopback IPv4 address. */
function outsideAddress(): string {
  const found = Object.values(networkInterfaces())
    .flat()
    .find((a) => a && a.family === 'IPv4' && !a.internal);
  if (!found) throw new Error('this machine has no non-loopback IPv4 address to call the host on');
  return found.address;
}

/** GET with a Host header of our choosing (fetch may not set one). */
function getWithHost(port: number, path: string, host: string): Promise<{ status: number; body: Json }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, headers: { host } }, (res) => {
      let text = '';
      res.on('data', (d) => {
        text += d;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('admin tokens and addresses', () => {
  it('takes a token of 16 or more characters, none when empty, and refuses a short one at start', () => {
    expect(adminToken(undefined, {})).toBeUndefined();
    expect(adminToken(undefined, { ONCELY_ADMIN_TOKEN: '' })).toBeUndefined();
    expect(adminToken(undefined, { ONCELY_ADMIN_TOKEN: TOKEN })).toBe(TOKEN);
    expect(adminToken('given-token-0123456789', { ONCELY_ADMIN_TOKEN: TOKEN })).toBe('given-token-0123456789');
    expect(() => adminToken('short')).toThrow(expect.objectContaining({ code: 'CONFIG_INVALID' }));
    expect(() => adminToken('has a space in it 0123')).toThrow(expect.objectContaining({ code: 'CONFIG_INVALID' }));
  });

  it('knows loopback addresses, in IPv4, IPv6 and IPv4-mapped form', () => {
    for (const a of ['127.0.0.1', '127.8.9.10', '::1', '::ffff:127.0.0.1', '::FFFF:127.0.0.2'])
      expect(isLoopback(a), a).toBe(true);
    for (const a of ['10.0.0.1', '::ffff:10.0.0.1', '128.0.0.1', '127.0.0.1.evil', '::2', '', undefined])
      expect(isLoopback(a), String(a)).toBe(false);
  });

  it("says in serve's banner which mode the admin API is in", () => {
    const index = routeIndex(
      { dir: '.', config: {}, schemaSql: '', handlers: new Map(), consumers: new Map(), flows: [] },
      'http://localhost:3000',
    );
    expect(serveBanner(index, '.', TOKEN)).toContain('admin API: /v1/admin (bearer token of ONCELY_ADMIN_TOKEN)');
    expect(serveBanner(index, '.', undefined)).toContain(
      'admin API: /v1/admin, loopback only: set ONCELY_ADMIN_TOKEN to open it',
    );
  });
});

describe.each(hostTargets())('admin access on $name', ({ target: makeTarget, cleanup }) => {
  let withToken: RunningHost;
  let loopbackOnly: RunningHost;
  const saved = process.env.ONCELY_ADMIN_TOKEN;

  beforeAll(async () => {
    withToken = await startHost(makeTarget(), {}, { host: { adminToken: TOKEN } });
    // No token given and none in the environment: loopback only.
    delete process.env.ONCELY_ADMIN_TOKEN;
    loopbackOnly = await startHost(makeTarget(), {});
  });
  afterAll(async () => {
    if (saved !== undefined) process.env.ONCELY_ADMIN_TOKEN = saved;
    await withToken?.stop();
    await loopbackOnly?.stop();
    await cleanup();
  });

  it('refuses a missing or wrong bearer token with 401 and WWW-Authenticate, and answers the right one', async () => {
    const get = (authorization?: string) =>
      fetch(`${withToken.base}/v1/admin/records`, { headers: authorization ? { authorization } : {} });
    for (const authorization of [
      undefined,
      `Bearer ${TOKEN}x`,
      `Bearer ${TOKEN.slice(0, -1)}`,
      'Bearer ',
      `Basic ${TOKEN}`,
      TOKEN,
    ]) {
      const res = await get(authorization);
      expect(res.status, String(authorization)).toBe(401);
      expect(res.headers.get('www-authenticate')).toMatch(/^Bearer/);
      expect(await res.json()).toMatchObject({ code: 401, error: { code: 'ADMIN_UNAUTHORIZED' } });
    }
    // A change without the token is refused before anything is read or written.
    const replay = await fetch(`${withToken.base}/v1/admin/events/dead/replay`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ all: true }),
    });
    expect(replay.status).toBe(401);
    // Unknown paths too: without the token nothing tells which routes exist.
    expect((await fetch(`${withToken.base}/v1/admin/nowhere`)).status).toBe(401);

    const right = await get(`Bearer ${TOKEN}`);
    expect(right.status).toBe(200);
    expect(await right.json()).toEqual({ code: 0, data: { records: [], cursor: null } });
    const metrics = withToken.host.metrics;
    expect(metrics.value('oncely_admin_actions_total', ['records.list', 'denied'])).toBe(6);
    expect(metrics.value('oncely_admin_actions_total', ['events.replay', 'denied'])).toBe(1);
    expect(metrics.value('oncely_admin_actions_total', ['records.list', 'done'])).toBe(1);
    // Denied requests write nothing: a flood of them costs no database writes.
    expect(await withToken.rows('SELECT * FROM oncely_admin_actions')).toEqual([]);
    // With a token set, the token is what counts, not the address: from off loopback it works.
    const port = new URL(withToken.base).port;
    const outside = await fetch(`http://${outsideAddress()}:${port}/v1/admin/stats`, {
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(outside.status).toBe(200);
  });

  it('without a token, answers loopback clients (audited as loopback) and refuses others with 403', async () => {
    const port = Number(new URL(loopbackOnly.base).port);
    const local = await fetch(`${loopbackOnly.base}/v1/admin/events/dead/replay`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-oncely-operator': 'Ada Lovelace' },
      body: JSON.stringify({ all: true }),
    });
    expect(await local.json()).toEqual({ code: 0, data: { replayed: 0 } });
    const rows = await loopbackOnly.rows('SELECT who, operator, action, target, outcome FROM oncely_admin_actions');
    expect(rows).toEqual([
      { who: 'loopback', operator: 'Ada Lovelace', action: 'events.replay', target: 'all', outcome: 'done' },
    ]);
    expect((await fetch(`http://localhost:${port}/v1/admin/stats`)).status).toBe(200);

    // The machine's own address off loopback: the socket says where the client is, not a header.
    const outside = await fetch(`http://${outsideAddress()}:${port}/v1/admin/stats`, {
      headers: { 'x-forwarded-for': '127.0.0.1', authorization: 'Bearer anything-at-all-here' },
    });
    expect(outside.status).toBe(403);
    expect(await outside.json()).toMatchObject({ code: 403, error: { code: 'ADMIN_FORBIDDEN' } });
    // A page elsewhere whose name resolves to 127.0.0.1 (DNS rebinding) names its own host.
    const rebound = await getWithHost(port, '/v1/admin/stats', `evil.example:${port}`);
    expect(rebound).toMatchObject({ status: 403, body: { error: { code: 'ADMIN_FORBIDDEN' } } });
    expect(loopbackOnly.host.metrics.value('oncely_admin_actions_total', ['stats.read', 'denied'])).toBe(2);
    // The other routes of the host are not the admin API's: they answer anyone as before.
    expect((await fetch(`http://${outsideAddress()}:${port}/v1/health`)).status).toBe(200);
  });
});
