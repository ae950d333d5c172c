import { describe, expect, it } from 'vitest';
import { toMs } from '../../src/core/duration.js';
import { stableUuid } from '../../src/core/ids.js';
import { decide, type StoredRecord } from '../../src/core/record.js';
import { canonicalJson, fingerprint, keyFrom, type OncelyError, validateKey } from '../../src/index.js';

const code = (fn: () => unknown) => {
  try {
    fn();
  } catch (error) {
    return (error as OncelyError).code;
  }
  return 'no error';
};

describe('keys', () => {
  it('joins parts with ":" and escapes separators so distinct parts never collide', () => {
    expect(keyFrom('ORD-10086', 'charge')).toBe('ORD-10086:charge');
    expect(keyFrom('a:b', 'c')).not.toBe(keyFrom('a', 'b:c'));
    expect(keyFrom('a:b', 'c')).not.toBe(keyFrom('a', 'b', 'c'));
    expect(keyFrom('a\\', 'b')).not.toBe(keyFrom('a', '\\b'));
    expect(keyFrom('order', 7, 10n)).toBe('order:7:10');
  });

  it('rejects empty parts, non-finite numbers and other types with typed errors', () => {
    expect(code(() => keyFrom())).toBe('KEY_REQUIRED');
    expect(code(() => keyFrom('a', ''))).toBe('KEY_INVALID');
    expect(code(() => keyFrom(Number.NaN))).toBe('KEY_INVALID');
    expect(code(() => keyFrom(null as unknown as string))).toBe('KEY_INVALID');
    expect(code(() => keyFrom('x'.repeat(200), 'y'.repeat(60)))).toBe('KEY_INVALID');
  });

  it('accepts 1 to 255 printable characters, counted as code points', () => {
    expect(validateKey('ÖRDER-😀')).toBe('ÖRDER-😀');
    expect(validateKey('😀'.repeat(255))).toHaveLength(510);
    expect(code(() => validateKey('😀'.repeat(256)))).toBe('KEY_INVALID');
    for (const bad of ['a\u0000b', 'tab\there', 'zero\u200bwidth', '   ', 12])
      expect(code(() => validateKey(bad))).toBe('KEY_INVALID');
    for (const missing of ['', undefined, null]) expect(code(() => validateKey(missing))).toBe('KEY_REQUIRED');
  });
});

describe('fingerprints', () => {
  it('sort keys at every depth and drop undefined members', () => {
    expect(canonicalJson({ b: 1, a: { d: [3, { z: 1, y: 2 }], c: undefined } })).toBe(
      '{"a":{"d":[3,{"y":2,"z":1}]},"b":1}',
    );
    expect(fingerprint({ a: 1, b: 2 })).toBe(fingerprint({ b: 2, a: 1 }));
    expect(fingerprint({ a: 1 })).not.toBe(fingerprint({ a: '1' }));
    expect(fingerprint(undefined)).toBe(fingerprint(null));
    expect(canonicalJson(new Date(0))).toBe('"1970-01-01T00:00:00.000Z"');
  });

  it('order keys by UTF-16 code units, as Array.prototype.sort does, in small and large objects alike', () => {
    for (const names of [
      ['é', 'Z', 'a', '😀', 'ﬀ', '10', '9', ''],
      Array.from({ length: 40 }, (_, i) => `k${(i * 17) % 40}`),
    ]) {
      const input = Object.fromEntries(names.map((name, i) => [name, i]));
      const expected = `{${[...names]
        .sort()
        .map((name) => `${JSON.stringify(name)}:${input[name]}`)
        .join(',')}}`;
      expect(canonicalJson(input)).toBe(expected);
    }
    // Strings needing escapes: quotes, backslashes, control characters, lone surrogates, long text.
    for (const text of ['say "hi"', 'a\\b', 'tab\there', '\ud800', 'é😀', 'x'.repeat(100), `${'x'.repeat(70)}"`]) {
      expect(canonicalJson({ [text]: text })).toBe(`{${JSON.stringify(text)}:${JSON.stringify(text)}}`);
    }
    expect(canonicalJson({ t: true, f: false, n: -0, big: 1e21, x: -1.5 })).toBe(
      '{"big":1e+21,"f":false,"n":0,"t":true,"x":-1.5}',
    );
  });

  it('refuses inputs that cannot be canonical', () => {
    const loop: Record<string, unknown> = {};
    loop.self = loop;
    expect(code(() => fingerprint(loop))).toBe('INPUT_NOT_SERIALIZABLE');
    expect(code(() => fingerprint({ n: 1n }))).toBe('INPUT_NOT_SERIALIZABLE');
  });

  it('defect 11.13: refuses a Map, a Set, a class instance and non-finite numbers instead of hashing them as {} or null', () => {
    class Account {
      #balance: number;
      constructor(balance: number) {
        this.#balance = balance;
      }
      get balance() {
        return this.#balance;
      }
    }
    // Each used to hash like its empty or null twin, so a different input replayed another's result.
    for (const input of [
      new Map([['amount', 1]]),
      { items: new Set([1, 2]) },
      [new Account(5)],
      { amount: Number.POSITIVE_INFINITY },
      { amount: Number.NaN },
      [Number('1e309')],
      { n: -Number.MAX_VALUE * 2 },
      { s: new String('x') },
    ])
      expect(
        code(() => fingerprint(input)),
        String(input),
      ).toBe('INPUT_NOT_SERIALIZABLE');
    // Plain objects of either prototype, arrays and a toJSON (Date, Buffer) still hash.
    const bare = Object.assign(Object.create(null) as object, { a: 1 });
    expect(fingerprint(bare)).toBe(fingerprint({ a: 1 }));
    expect(canonicalJson({ at: new Date(0), b: Buffer.from('x'), l: [null] })).toBe(
      '{"at":"1970-01-01T00:00:00.000Z","b":{"data":[120],"type":"Buffer"},"l":[null]}',
    );
  });
});

describe('durations', () => {
  it('reads numbers and unit strings as milliseconds', () => {
    expect([
      toMs(250, 't'),
      toMs('250ms', 't'),
      toMs('30s', 't'),
      toMs('5m', 't'),
      toMs('24h', 't'),
      toMs('1.5d', 't'),
    ]).toEqual([250, 250, 30_000, 300_000, 86_400_000, 129_600_000]);
  });
  it('rejects anything else with INVALID_ARGUMENT', () => {
    for (const bad of ['30', '5 minutes', '-1s', -5, Number.POSITIVE_INFINITY, 'permanent'])
      expect(code(() => toMs(bad as never, 'lease'))).toBe('INVALID_ARGUMENT');
  });
});

describe('stable ids', () => {
  it('are deterministic, UUID-formatted and distinct per part boundary', () => {
    expect(stableUuid('a', 'b')).toBe(stableUuid('a', 'b'));
    expect(stableUuid('ab', '')).not.toBe(stableUuid('a', 'b'));
    expect(stableUuid('x')).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });
});

describe('the decision', () => {
  const now = 1_000_000;
  const base: StoredRecord = {
    tenant: 't',
    action: 'a',
    key: 'k',
    state: 'succeeded',
    fingerprint: 'f',
    fence: 1,
    attempts: 1,
    leaseUntil: null,
    result: '{}',
    traceId: 'x',
    createdAt: 0,
    updatedAt: 0,
    completedAt: 0,
    expiresAt: now + 1,
  };
  const at = (patch: Partial<StoredRecord>, print = 'f', policy: 'retry' | 'hold' = 'retry') =>
    decide({ ...base, ...patch }, print, policy, now).kind;

  it('covers every state', () => {
    expect(at({})).toBe('replay');
    expect(at({ state: 'failed' })).toBe('replay');
    expect(at({}, 'other')).toBe('key_reused');
    expect(at({ expiresAt: now })).toBe('start_fresh');
    expect(at({ expiresAt: null })).toBe('replay');
    expect(at({ state: 'released' }, 'other')).toBe('take_over');
    expect(at({ state: 'unknown', expiresAt: now - 5 })).toBe('unknown');
    expect(at({ state: 'in_progress', leaseUntil: now + 5, expiresAt: now - 5 })).toBe('in_progress');
    expect(at({ state: 'in_progress', leaseUntil: now }, 'f', 'retry')).toBe('take_over');
    expect(at({ state: 'in_progress', leaseUntil: now }, 'f', 'hold')).toBe('mark_unknown');
    expect(at({ state: 'in_progress', leaseUntil: now }, 'other')).toBe('key_reused');
  });

  it('caps the retry hint between 10ms and 1s', () => {
    const hint = (left: number) => {
      const d = decide({ ...base, state: 'in_progress', leaseUntil: now + left }, 'f', 'retry', now);
      return d.kind === 'in_progress' ? d.retryAfterMs : -1;
    };
    expect([hint(1), hint(500), hint(30_000)]).toEqual([10, 500, 1_000]);
  });
});
