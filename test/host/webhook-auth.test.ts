import { execFile } from 'node:child_process';
import { createHmac, randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { openDb } from '../../src/db/index.js';
import type { Db } from '../../src/db/types.js';
import type { App, ConsumerModule } from '../../src/host/app.js';
import type { HostConfig } from '../../src/host/config.js';
import { EventQueue } from '../../src/host/events.js';
import { createHost, type Host } from '../../src/host/host.js';
import { recordStoreFor } from '../../src/host/records.js';
import type { HostEvent } from '../../src/host/types.js';
import {
  readWebhook,
  type SourceConfig,
  signBodyHmac,
  signStandardWebhook,
  signStripeWebhook,
  validateSources,
} from '../../src/host/webhooks.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';

const STRIPE_SECRET = `whsec_${randomBytes(24).toString('hex')}`;
const STANDARD_SECRET = `whsec_${randomBytes(32).toString('base64')}`;
const GITHUB_SECRET = randomBytes(20).toString('hex');
const NOW = 1_760_000_000_000;
const seconds = (ms: number) => Math.floor(ms / 1000);
const stripe = {
  kind: 'id-field',
  idField: 'id',
  typeField: 'type',
  verify: 'stripe',
  secret: STRIPE_SECRET,
} as const satisfies SourceConfig;
const charge = (id: string, amount = 100) => JSON.stringify({ id, type: 'charge.succeeded', data: { amount } });

/** The message of the CONFIG_INVALID that validateSources throws for `sources`, or 'ok'. */
function refusal(sources: Record<string, unknown>): string {
  try {
    validateSources({ sources: sources as Record<string, SourceConfig> }, () => {});
    return 'ok';
  } catch (error) {
    expect(error).toMatchObject({ name: 'OncelyError', code: 'CONFIG_INVALID' });
    return (error as Error).message;
  }
}

describe('Stripe signatures (Stripe-Signature)', () => {
  it('defect 11.6: a forged Stripe event is refused with 401', () => {
    const body = Buffer.from(charge('evt_1'));
    const forged = [
      {},
      { 'stripe-signature': signStripeWebhook(`whsec_${randomBytes(24).toString('hex')}`, seconds(NOW), body) },
      { 'stripe-signature': `t=${seconds(NOW)}` },
      { 'stripe-signature': `t=${seconds(NOW)},v1=${'0'.repeat(64)}` },
      { 'stripe-signature': signStripeWebhook(STRIPE_SECRET, seconds(NOW), body).replace(/^t=\d+/, 't=soon') },
    ];
    for (const headers of forged)
      expect(readWebhook(stripe, headers, body, NOW)).toMatchObject({
        ok: false,
        status: 401,
        code: 'SIGNATURE_INVALID',
      });
    const signed = signStripeWebhook(STRIPE_SECRET, seconds(NOW), body);
    const tampered = Buffer.from(charge('evt_1', 1_000_000));
    expect(readWebhook(stripe, { 'Stripe-Signature': signed }, tampered, NOW)).toMatchObject({ status: 401 });
    // The timestamp is signed too: a valid v1 with another t is refused.
    expect(
      readWebhook(stripe, { 'Stripe-Signature': signed.replace(/^t=\d+/, `t=${seconds(NOW) - 1}`) }, body, NOW),
    ).toMatchObject({ status: 401, code: 'SIGNATURE_INVALID' });
  });

  it('defect 11.6: accepts Stripe’s scheme, HMAC-SHA256 of t, a dot and the raw body, keyed by the whole whsec_ secret, in hex', () => {
    const body = charge('evt_1NG8Du2eZvKYlo2CUI79vXWy');
    const t = seconds(NOW);
    // Computed here by hand, as Stripe documents it, not with the signer under test.
    const v1 = createHmac('sha256', Buffer.from(STRIPE_SECRET, 'utf8')).update(`${t}.${body}`).digest('hex');
    expect(signStripeWebhook(STRIPE_SECRET, t, body)).toBe(`t=${t},v1=${v1}`);
    expect(
      readWebhook(stripe, { 'Stripe-Signature': `t=${t},v1=${v1},v0=${'ab'.repeat(32)}` }, Buffer.from(body), NOW),
    ).toEqual({
      ok: true,
      id: 'evt_1NG8Du2eZvKYlo2CUI79vXWy',
      type: 'charge.succeeded',
      data: JSON.parse(body),
    });
  });

  it('defect 11.6: several v1 signatures (a secret being rolled) are accepted when one matches', () => {
    const body = Buffer.from(charge('evt_2'));
    const t = seconds(NOW);
    const rolled = `whsec_${randomBytes(24).toString('hex')}`;
    const both = `t=${t},v1=${randomBytes(32).toString('hex')},v1=${signStripeWebhook(STRIPE_SECRET, t, body).split('v1=')[1]}`;
    expect(readWebhook(stripe, { 'stripe-signature': both }, body, NOW).ok).toBe(true);
    const signedByNew = signStripeWebhook(rolled, t, body);
    expect(readWebhook(stripe, { 'stripe-signature': signedByNew }, body, NOW).ok).toBe(false);
    expect(
      readWebhook({ ...stripe, secret: [STRIPE_SECRET, rolled] }, { 'stripe-signature': signedByNew }, body, NOW).ok,
    ).toBe(true);
  });

  it('defect 11.6: a Stripe timestamp more than 300 s away is refused, toleranceSeconds widens it', () => {
    const body = Buffer.from(charge('evt_3'));
    for (const at of [NOW - 301_000, NOW + 301_000])
      expect(
        readWebhook(stripe, { 'stripe-signature': signStripeWebhook(STRIPE_SECRET, seconds(at), body) }, body, NOW),
      ).toMatchObject({ status: 401, code: 'TIMESTAMP_OUT_OF_TOLERANCE' });
    const old = { 'stripe-signature': signStripeWebhook(STRIPE_SECRET, seconds(NOW - 299_000), body) };
    expect(readWebhook(stripe, old, body, NOW).ok).toBe(true);
    const older = { 'stripe-signature': signStripeWebhook(STRIPE_SECRET, seconds(NOW - 500_000), body) };
    expect(readWebhook({ ...stripe, toleranceSeconds: 600 }, older, body, NOW).ok).toBe(true);
  });

  it('defect 11.6: an id-field source with neither verify nor unsigned: true accepts nothing', () => {
    const bare = { kind: 'id-field', idField: 'id', typeField: 'type' } as unknown as SourceConfig;
    expect(readWebhook(bare, {}, Buffer.from(charge('evt_4')))).toMatchObject({ status: 401 });
    expect(readWebhook({ ...bare, unsigned: true } as SourceConfig, {}, Buffer.from(charge('evt_4'))).ok).toBe(true);
  });
});

describe('GitHub signatures (X-Hub-Signature-256)', () => {
  it('defect 11.6: an id-header source with a secret still refuses a missing or wrong X-Hub-Signature-256', () => {
    const source: SourceConfig = {
      kind: 'id-header',
      idHeader: 'X-GitHub-Delivery',
      typeHeader: 'X-GitHub-Event',
      secret: GITHUB_SECRET,
    };
    const body = '{"action":"opened"}';
    const headers = { 'x-github-delivery': 'd-1', 'x-github-event': 'pull_request' };
    expect(readWebhook(source, headers, Buffer.from(body))).toMatchObject({ status: 401, code: 'SIGNATURE_INVALID' });
    const wrong = { ...headers, 'x-hub-signature-256': signBodyHmac('another-secret-of-20c', body) };
    expect(readWebhook(source, wrong, Buffer.from(body))).toMatchObject({ status: 401 });
    const right = { ...headers, 'x-hub-signature-256': signBodyHmac(GITHUB_SECRET, body) };
    expect(readWebhook(source, right, Buffer.from(body))).toMatchObject({ ok: true, id: 'd-1' });
  });

  it('defect 11.6: an id-header source whose secret is missing (unset environment variable) accepts nothing', () => {
    const source = {
      kind: 'id-header',
      idHeader: 'x-id',
      typeField: 'type',
      secret: undefined,
    } as unknown as SourceConfig;
    expect(readWebhook(source, { 'x-id': 'r-1' }, Buffer.from('{"type":"ping"}'))).toMatchObject({ status: 401 });
  });
});

describe('source configuration, checked at start', () => {
  it('defect 11.6: a source without a secret and without unsigned: true is refused at start, naming the source', () => {
    expect(refusal({ stripe: { kind: 'id-field', idField: 'id', typeField: 'type' } })).toBe(
      `webhook source "stripe": verify must be 'stripe' (with its secret), or say unsigned: true`,
    );
    expect(refusal({ stripe: { ...stripe, secret: undefined } })).toMatch(
      /^webhook source "stripe": secret is missing/,
    );
    expect(refusal({ gh: { kind: 'id-header', idHeader: 'x-github-delivery' } })).toMatch(
      /^webhook source "gh": secret is missing \(is its environment variable set\?\)/,
    );
    expect(refusal({ gh: { kind: 'id-header', idHeader: 'x', secret: GITHUB_SECRET, unsigned: true } })).toMatch(
      /"gh": unsigned cannot be combined with a secret/,
    );
    expect(refusal({ stripe, gh: { kind: 'id-header', idHeader: 'x', secret: GITHUB_SECRET } })).toBe('ok');
  });

  it('defect 11.6: an unsigned source is accepted only when it says so, and is logged as unsigned at start', () => {
    const warned: string[] = [];
    validateSources(
      { sources: { relay: { kind: 'id-field', idField: 'id', typeField: 'type', unsigned: true }, stripe } },
      (line) => warned.push(line),
    );
    expect(warned).toEqual([
      'oncely: webhook source "relay" is unsigned: anyone who can reach /v1/webhooks/relay can post its events',
    ]);
  });

  it('defect 11.16: an empty, non-base64 or short secret and a NaN, zero or negative tolerance are refused at start', () => {
    const std = (secret: unknown, extra: Record<string, unknown> = {}) =>
      refusal({ shop: { kind: 'standard-webhooks', secret, ...extra } });
    expect(std('whsec_')).toBe('webhook source "shop": secret is not whsec_ followed by base64');
    expect(std('whsec_not base64!!')).toBe('webhook source "shop": secret is not whsec_ followed by base64');
    expect(std(`whsec_${randomBytes(8).toString('base64')}`)).toBe(
      'webhook source "shop": secret decodes to 8 bytes, fewer than 16',
    );
    expect(std('')).toMatch(/"shop": secret is empty/);
    expect(std([STANDARD_SECRET, 'whsec_'])).toBe('webhook source "shop": secret[1] is not whsec_ followed by base64');
    expect(std([])).toMatch(/"shop": secret is missing/);
    for (const toleranceSeconds of [Number.NaN, 0, -5, Number.POSITIVE_INFINITY, '300'])
      expect(std(STANDARD_SECRET, { toleranceSeconds })).toMatch(
        /^webhook source "shop": toleranceSeconds must be a positive number of seconds/,
      );
    expect(refusal({ stripe: { ...stripe, toleranceSeconds: Number.NaN } })).toMatch(/"stripe": toleranceSeconds/);
    expect(refusal({ stripe: { ...stripe, secret: 'whsec_short' } })).toBe(
      'webhook source "stripe": secret has 5 characters, fewer than 16',
    );
    expect(refusal({ stripe: { ...stripe, secret: 'sk_live_0123456789abcdef' } })).toMatch(
      /"stripe": secret is not a Stripe endpoint secret/,
    );
    expect(refusal({ gh: { kind: 'id-header', idHeader: 'x', secret: 'hunter2' } })).toBe(
      'webhook source "gh": secret has 7 characters, fewer than 16',
    );
    expect(std(STANDARD_SECRET, { toleranceSeconds: 60 })).toBe('ok');
  });

  it('defect 11.16: a whsec_ secret (an empty HMAC key) verifies nothing, even when the start-up check was skipped', () => {
    const body = '{"type":"order.paid"}';
    const at = seconds(NOW);
    for (const weak of ['whsec_', 'whsec_!!!!', `whsec_${randomBytes(8).toString('base64')}`]) {
      const headers = {
        'webhook-id': 'msg_1',
        'webhook-timestamp': String(at),
        'webhook-signature': signStandardWebhook(weak, 'msg_1', at, body),
      };
      expect(readWebhook({ kind: 'standard-webhooks', secret: weak }, headers, Buffer.from(body), NOW)).toMatchObject({
        status: 401,
        code: 'SIGNATURE_INVALID',
      });
    }
  });

  it('defect 11.16: toleranceSeconds NaN does not disable the replay window', () => {
    const body = '{"type":"order.paid"}';
    const at = seconds(NOW - 24 * 3_600_000);
    const headers = {
      'webhook-id': 'msg_1',
      'webhook-timestamp': String(at),
      'webhook-signature': signStandardWebhook(STANDARD_SECRET, 'msg_1', at, body),
    };
    const source = { kind: 'standard-webhooks', secret: STANDARD_SECRET, toleranceSeconds: Number.NaN } as const;
    expect(readWebhook(source, headers, Buffer.from(body), NOW)).toMatchObject({
      status: 401,
      code: 'TIMESTAMP_OUT_OF_TOLERANCE',
    });
    const stripeHeaders = { 'stripe-signature': signStripeWebhook(STRIPE_SECRET, at, body) };
    expect(
      readWebhook({ ...stripe, toleranceSeconds: Number.NaN }, stripeHeaders, Buffer.from(body), NOW),
    ).toMatchObject({
      status: 401,
      code: 'TIMESTAMP_OUT_OF_TOLERANCE',
    });
  });

  it('defect 11.17: a webhook source named outbox is refused at start, and names must be plain tokens', () => {
    const gh = { kind: 'id-header', idHeader: 'x', secret: GITHUB_SECRET };
    for (const name of ['outbox', 'Outbox'])
      expect(refusal({ [name]: gh })).toBe(
        `webhook source "${name}": name is reserved: the outbox delivers its messages as source "outbox"`,
      );
    for (const name of ['', 'a/b', '__proto__', ' shop', 'shop\n', 'x'.repeat(65), '../x'])
      expect(refusal(Object.fromEntries([[name, gh]]))).toMatch(/name must be a plain token/);
    expect(refusal({ 'github-app_2.prod': gh, constructor: gh })).toBe('ok');
  });

  it('defect 11.16: the shop example refuses to start without SHOP_WEBHOOK_SECRET unless ONCELY_DEMO=1', async () => {
    const config = fileURLToPath(new URL('../../examples/shop/oncely.config.ts', import.meta.url));
    const load = (env: Record<string, string>) =>
      promisify(execFile)(
        process.execPath,
        [
          '--import',
          'tsx',
          '--input-type=module',
          '-e',
          `const c = (await import(${JSON.stringify(config)})).default; console.log(c.sources.shop.secret)`,
        ],
        { env: { PATH: process.env.PATH ?? '', ...env } },
      );
    await expect(load({})).rejects.toMatchObject({ stderr: expect.stringContaining('SHOP_WEBHOOK_SECRET is not set') });
    await expect(load({ NODE_ENV: 'development' })).rejects.toMatchObject({ code: 1 });
    expect((await load({ ONCELY_DEMO: '1' })).stdout.trim()).toMatch(/^whsec_/);
    expect((await load({ SHOP_WEBHOOK_SECRET: STANDARD_SECRET })).stdout.trim()).toBe(STANDARD_SECRET);
  });
});

/** One database per test: a SQLite file, or a fresh PostgreSQL schema. */
const targets: [string, () => { url: string; dispose(): Promise<void> }][] = [
  ['SQLite', () => ({ url: join(mkdtempSync(join(tmpdir(), 'oncely-hooks-')), 'app.db'), dispose: async () => {} })],
  [
    'PostgreSQL',
    () => {
      const schema = freshSchema();
      return { url: `${POSTGRES_URL}?schema=${schema}`, dispose: () => dropSchema(schema) };
    },
  ],
];

for (const [dialect, makeTarget] of targets)
  describe(`webhook intake on ${dialect}`, () => {
    const cleanup: (() => Promise<void>)[] = [];
    afterEach(async () => {
      for (const step of cleanup.splice(0).reverse()) await step();
      vi.restoreAllMocks();
    });

    /** A host on a fresh database whose consumers record what they applied. */
    const hostWith = async (sources: HostConfig['sources'], consumed: HostEvent[] = []) => {
      const target = makeTarget();
      cleanup.push(() => target.dispose());
      const consumer: ConsumerModule = { handle: (event) => void consumed.push(event) };
      const consumers = new Map(Object.keys(sources ?? {}).map((s) => [`${s}/charge.succeeded`, consumer]));
      const app: App = { dir: '.', config: { sources }, schemaSql: '', handlers: new Map(), consumers, flows: [] };
      const db = await openDb(target.url);
      const host = await createHost(app, db, recordStoreFor(db)).catch(async (error) => {
        await db.close();
        throw error;
      });
      cleanup.push(() => host.stop());
      await host.migrate();
      return host;
    };
    const post = async (host: Host, source: string, body: string, headers: Record<string, string> = {}) => {
      const res = await host.http.request(`/v1/webhooks/${source}`, { method: 'POST', body, headers });
      return {
        status: res.status,
        body: (await res.json()) as { code: unknown; data?: Record<string, unknown>; error?: unknown },
      };
    };
    const signed = (body: string) => ({
      'stripe-signature': signStripeWebhook(STRIPE_SECRET, seconds(Date.now()), body),
    });

    it('defect 11.6: a forged Stripe event is refused with 401 and cannot take a real event’s id first', async () => {
      const consumed: HostEvent[] = [];
      const host = await hostWith({ stripe }, consumed);
      const forged = charge('evt_real', 1);
      expect(await post(host, 'stripe', forged)).toMatchObject({
        status: 401,
        body: { error: { code: 'SIGNATURE_INVALID' } },
      });
      expect(
        await post(host, 'stripe', forged, {
          'stripe-signature': signStripeWebhook(`whsec_${'f'.repeat(32)}`, seconds(Date.now()), forged),
        }),
      ).toMatchObject({ status: 401 });
      expect(await host.events.get('stripe', 'evt_real')).toBeNull();
      const real = charge('evt_real', 4200);
      expect(await post(host, 'stripe', real, signed(real))).toMatchObject({
        status: 200,
        body: { code: 0, data: { id: 'evt_real', outcome: 'accepted', duplicate: false, conflict: false } },
      });
      await host.events.drain();
      expect(consumed.map((e) => e.data)).toEqual([JSON.parse(real)]);
    });

    it('defect 11.15: /v1/webhooks/__proto__, constructor and toString answer 404 SOURCE_UNKNOWN', async () => {
      const host = await hostWith({ stripe });
      for (const name of ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'nope'])
        expect(await post(host, name, charge('evt_1'))).toEqual({
          status: 404,
          body: { code: 404, error: { code: 'SOURCE_UNKNOWN', message: `no webhook source ${name}` } },
        });
    });

    it('defect 11.17: a host with a webhook source named outbox refuses to start, so forged outbox messages cannot be posted', async () => {
      await expect(
        hostWith({ outbox: { kind: 'id-field', idField: 'id', typeField: 'type', unsigned: true } }),
      ).rejects.toMatchObject({
        code: 'CONFIG_INVALID',
        message: expect.stringContaining('webhook source "outbox": name is reserved'),
      });
      const host = await hostWith({ stripe });
      expect(await post(host, 'outbox', charge('evt_1'))).toMatchObject({ status: 404 });
    });

    it('defect 11.18: a duplicate webhook id with a different, validly signed body is counted and logged as a conflict, answered 2xx', async () => {
      const warn = vi.spyOn(console, 'warn').mockImplementation(() => {});
      const consumed: HostEvent[] = [];
      const host = await hostWith({ stripe }, consumed);
      const first = charge('evt_9', 100);
      expect(await post(host, 'stripe', first, signed(first))).toMatchObject({
        status: 200,
        body: { data: { outcome: 'accepted' } },
      });
      expect(await post(host, 'stripe', first, signed(first))).toMatchObject({
        status: 200,
        body: { data: { outcome: 'duplicate', duplicate: true, conflict: false } },
      });
      const other = charge('evt_9', 999_999);
      expect(await post(host, 'stripe', other, signed(other))).toMatchObject({
        status: 200,
        body: { code: 0, data: { id: 'evt_9', outcome: 'conflict', duplicate: true, conflict: true } },
      });
      expect(warn.mock.calls.map((c) => String(c[0]))).toEqual([
        'oncely event queue: stripe/evt_9 arrived again with another body (conflict); the first is kept',
      ]);
      expect(await host.events.stats()).toMatchObject({ accepted: 1, duplicate: 1, conflict: 1 });
      await host.events.drain();
      expect(consumed.map((e) => e.data)).toEqual([JSON.parse(first)]);
    });

    it('defect 11.18: the body-hash migration upgrades an event table of the previous version, and its rows still detect conflicts', async () => {
      const target = makeTarget();
      cleanup.push(() => target.dispose());
      const db: Db = await openDb(target.url);
      cleanup.push(() => db.close());
      // The table as the previous version created it: no body_hash column.
      const big = db.dialect === 'postgres' ? 'BIGINT' : 'INTEGER';
      await db.run(`CREATE TABLE oncely_events (source TEXT NOT NULL, event_id TEXT NOT NULL, type TEXT NOT NULL,
        payload TEXT NOT NULL, status TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, next_attempt_at ${big} NOT NULL,
        lease_until ${big}, last_error TEXT, received_at ${big} NOT NULL, updated_at ${big} NOT NULL, PRIMARY KEY (source, event_id))`);
      await db.run(
        `INSERT INTO oncely_events (source, event_id, type, payload, status, attempts, next_attempt_at, received_at, updated_at)
         VALUES ('stripe', 'evt_old', 'charge.succeeded', '{"amount":1}', 'applied', 1, 0, 0, 0)`,
      );
      const queue = new EventQueue(db, { consumerFor: () => undefined, onConflict: () => {} });
      await queue.migrate();
      await queue.migrate(); // a second start finds the column and changes nothing
      expect(await queue.intake('stripe', 'evt_old', 'charge.succeeded', { amount: 1 })).toBe('duplicate');
      expect(await queue.intake('stripe', 'evt_old', 'charge.succeeded', { amount: 2 })).toBe('conflict');
      expect(await queue.intake('stripe', 'evt_new', 'charge.succeeded', { amount: 3 })).toBe('accepted');
      expect(await queue.intake('stripe', 'evt_new', 'charge.refunded', { amount: 3 })).toBe('conflict');
      expect(await queue.intake('stripe', 'evt_new', 'charge.succeeded', { amount: 3 })).toBe('duplicate');
      expect(await queue.stats()).toMatchObject({ accepted: 1, duplicate: 2, conflict: 2 });
    });
  });
