import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { readWebhook, type SourceConfig, signBodyHmac, signStandardWebhook } from '../../src/host/webhooks.js';

const secret = (): string => `whsec_${randomBytes(24).toString('base64')}`;
const NOW = 1_760_000_000_000;
const seconds = (ms: number) => Math.floor(ms / 1000);

function standard(
  source: Extract<SourceConfig, { kind: 'standard-webhooks' }>,
  signWith: string,
  options: { id?: string; at?: number; body?: string; signature?: (s: string) => string } = {},
) {
  const id = options.id ?? 'msg_2KWPBgLlAfxdpx2AI54pPJ85f4W';
  const at = seconds(options.at ?? NOW);
  const body = options.body ?? JSON.stringify({ type: 'order.paid', data: { orderId: 'ORD-1' } });
  const signed = signStandardWebhook(signWith, id, at, body);
  const headers = {
    'Webhook-Id': id,
    'Webhook-Timestamp': String(at),
    'Webhook-Signature': options.signature ? options.signature(signed) : signed,
  };
  return readWebhook(source, headers, Buffer.from(body), NOW);
}

describe('Standard Webhooks', () => {
  const key = secret();
  const source = { kind: 'standard-webhooks', secret: key } as const;

  it('accepts a valid signature and reads id, type and body', () => {
    expect(standard(source, key)).toEqual({
      ok: true,
      id: 'msg_2KWPBgLlAfxdpx2AI54pPJ85f4W',
      type: 'order.paid',
      data: { type: 'order.paid', data: { orderId: 'ORD-1' } },
    });
  });

  it('matches the reference implementation on its published example', () => {
    // From the Standard Webhooks reference libraries' tests.
    const body = '{"test": 2432232314}';
    const sig = signStandardWebhook(
      'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
      'msg_p5jXN8AQM9LWM0D4loKWxJek',
      1614265330,
      body,
    );
    expect(sig).toBe('v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=');
  });

  it('accepts the second of two secrets while a secret is rotated', () => {
    const next = secret();
    expect(standard({ ...source, secret: [key, next] }, next).ok).toBe(true);
    expect(standard({ ...source, secret: [next] }, key)).toMatchObject({ ok: false, status: 401 });
  });

  it('accepts a header with several signatures, one of them valid', () => {
    const other = secret();
    const r = standard(source, key, {
      signature: (valid) => `v1,${randomBytes(32).toString('base64')} v1a,abc ${valid} v1,not-base64!`,
    });
    expect(r.ok).toBe(true);
    expect(
      standard(source, other, { signature: (s) => `${s} v1,${randomBytes(32).toString('base64')}` }),
    ).toMatchObject({
      ok: false,
      status: 401,
      code: 'SIGNATURE_INVALID',
    });
  });

  it('refuses a tampered body, a wrong secret and missing headers with 401', () => {
    const body = JSON.stringify({ type: 'order.paid', amount: 100 });
    const at = seconds(NOW);
    const headers = {
      'webhook-id': 'msg_1',
      'webhook-timestamp': String(at),
      'webhook-signature': signStandardWebhook(key, 'msg_1', at, body),
    };
    const tampered = Buffer.from(body.replace('100', '1000'));
    expect(readWebhook(source, headers, tampered, NOW)).toMatchObject({ status: 401, code: 'SIGNATURE_INVALID' });
    // The id is signed too: another id with the same signature is refused.
    expect(readWebhook(source, { ...headers, 'webhook-id': 'msg_2' }, Buffer.from(body), NOW)).toMatchObject({
      status: 401,
    });
    expect(standard(source, secret())).toMatchObject({ status: 401, code: 'SIGNATURE_INVALID' });
    expect(readWebhook(source, { ...headers, 'webhook-signature': undefined }, Buffer.from(body), NOW)).toMatchObject({
      status: 401,
    });
    expect(readWebhook(source, { ...headers, 'webhook-timestamp': 'soon' }, Buffer.from(body), NOW)).toMatchObject({
      status: 401,
    });
  });

  it('verifies nothing when the configured secret is empty or missing', () => {
    for (const none of ['', [], undefined])
      expect(standard({ ...source, secret: none as unknown as string }, key)).toMatchObject({ status: 401 });
  });

  it('refuses a timestamp 6 minutes old or ahead, accepts 4 minutes, and honours toleranceSeconds', () => {
    const minute = 60_000;
    for (const at of [NOW - 6 * minute, NOW + 6 * minute])
      expect(standard(source, key, { at })).toMatchObject({ status: 401, code: 'TIMESTAMP_OUT_OF_TOLERANCE' });
    for (const at of [NOW - 4 * minute, NOW + 4 * minute]) expect(standard(source, key, { at }).ok).toBe(true);
    expect(standard({ ...source, toleranceSeconds: 600 }, key, { at: NOW - 6 * minute }).ok).toBe(true);
  });

  it('refuses a body that is not JSON, or has no type, with 400', () => {
    expect(standard(source, key, { body: 'type=order.paid' })).toMatchObject({ status: 400, code: 'BODY_INVALID' });
    expect(standard(source, key, { body: '{"kind":"order.paid"}' })).toMatchObject({
      status: 400,
      code: 'BODY_INVALID',
    });
    expect(standard(source, key, { body: '[1]' })).toMatchObject({ status: 400, code: 'BODY_INVALID' });
    expect(standard({ ...source, typeField: 'kind' }, key, { body: '{"kind":"order.paid"}' })).toMatchObject({
      ok: true,
      type: 'order.paid',
    });
  });

  it('refuses an id that is not a valid key with 400, after the signature checks out', () => {
    expect(standard(source, key, { id: 'a\u0000b' })).toMatchObject({ status: 400, code: 'EVENT_ID_INVALID' });
    expect(standard(source, key, { id: 'x'.repeat(256) })).toMatchObject({ status: 400, code: 'EVENT_ID_INVALID' });
  });
});

describe('id header (GitHub)', () => {
  const source: SourceConfig = {
    kind: 'id-header',
    idHeader: 'X-GitHub-Delivery',
    typeHeader: 'X-GitHub-Event',
    secret: ['old-secret', 'It’s a Secret to Everybody'],
  };
  const body = JSON.stringify({ action: 'opened', number: 1 });

  it('reads the delivery id and event header, and verifies X-Hub-Signature-256', () => {
    const headers = {
      'x-github-delivery': '72d3162e-cc78-11e3-81ab-4c9367dc0958',
      'x-github-event': 'pull_request',
      'x-hub-signature-256': signBodyHmac('It’s a Secret to Everybody', body),
    };
    expect(readWebhook(source, headers, Buffer.from(body))).toEqual({
      ok: true,
      id: '72d3162e-cc78-11e3-81ab-4c9367dc0958',
      type: 'pull_request',
      data: { action: 'opened', number: 1 },
    });
  });

  it('matches GitHub’s documented example signature', () => {
    expect(signBodyHmac("It's a Secret to Everybody", 'Hello, World!')).toBe(
      'sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17',
    );
  });

  it('refuses a wrong or missing HMAC with 401 and a missing id with 400', () => {
    const headers = { 'X-GitHub-Delivery': 'd-1', 'X-GitHub-Event': 'push' };
    expect(
      readWebhook(source, { ...headers, 'X-Hub-Signature-256': signBodyHmac('nope', body) }, Buffer.from(body)),
    ).toMatchObject({ status: 401, code: 'SIGNATURE_INVALID' });
    expect(readWebhook(source, headers, Buffer.from(body))).toMatchObject({ status: 401 });
    const signed = { 'X-Hub-Signature-256': signBodyHmac('old-secret', body) };
    expect(readWebhook(source, { ...signed, 'X-GitHub-Event': 'push' }, Buffer.from(body))).toMatchObject({
      status: 400,
      code: 'EVENT_ID_MISSING',
    });
    expect(readWebhook(source, { ...signed, 'X-GitHub-Delivery': 'd-1' }, Buffer.from(body))).toMatchObject({
      status: 400,
      code: 'EVENT_TYPE_MISSING',
    });
  });

  it('needs no signature when the source says unsigned: true, and can read the type from the body', () => {
    const r = readWebhook(
      { kind: 'id-header', idHeader: 'X-Request-Id', typeField: 'event', unsigned: true },
      { 'x-request-id': 'r-1' },
      Buffer.from('{"event":"ping"}'),
    );
    expect(r).toMatchObject({ ok: true, id: 'r-1', type: 'ping' });
  });
});

describe('id field (Stripe)', () => {
  // Unsigned here to test reading alone; Stripe's signatures are in webhook-auth.test.ts.
  const source: SourceConfig = { kind: 'id-field', idField: 'id', typeField: 'type', unsigned: true };

  it('reads the event id and type from the body', () => {
    const body = JSON.stringify({ id: 'evt_1NG8Du2eZvKYlo2CUI79vXWy', type: 'charge.succeeded', data: { object: {} } });
    expect(readWebhook(source, {}, Buffer.from(body))).toMatchObject({
      ok: true,
      id: 'evt_1NG8Du2eZvKYlo2CUI79vXWy',
      type: 'charge.succeeded',
    });
  });

  it('refuses a missing or invalid id and a missing type with 400', () => {
    expect(readWebhook(source, {}, Buffer.from('{"type":"charge.succeeded"}'))).toMatchObject({
      status: 400,
      code: 'EVENT_ID_MISSING',
    });
    expect(readWebhook(source, {}, Buffer.from('{"id":"  ","type":"charge.succeeded"}'))).toMatchObject({
      status: 400,
      code: 'EVENT_ID_INVALID',
    });
    expect(readWebhook(source, {}, Buffer.from('{"id":{"a":1},"type":"x"}'))).toMatchObject({
      status: 400,
      code: 'EVENT_ID_INVALID',
    });
    expect(readWebhook(source, {}, Buffer.from('{"id":"evt_1"}'))).toMatchObject({ status: 400, code: 'BODY_INVALID' });
    expect(readWebhook(source, {}, Buffer.from('{not json'))).toMatchObject({ status: 400, code: 'BODY_INVALID' });
  });
});
