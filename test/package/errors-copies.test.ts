/**
 * Two copies of oncely in one process, as npm installs them when two packages of an app depend on
 * different versions: this checkout (the sources the tests import, copy A) and the built package
 * copied into a folder of its own (copy B, `npm run build` first). Their classes differ, so
 * `instanceof` of one copy misses the other's errors; `OncelyError.is` reads the brand every oncely
 * error carries, and oncely's own checks use it: an OncelyError a handler throws from copy B is
 * answered with its code, not as a 500.
 */
import { cpSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PublicRecord } from '../../src/core/record.js';
import { createOncely, OncelyError } from '../../src/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';
import type { RecordStore } from '../../src/store.js';
import { type RunningHost, startHost } from '../support/host-app.js';

type Copy = typeof import('../../src/index.js');

const DIST = fileURLToPath(new URL('../../dist/', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'oncely-copy-'));
// Under node_modules, as npm installs it (and so Node, not vitest, loads it).
const copy = join(dir, 'node_modules', 'oncely');
let B: Copy;

beforeAll(async () => {
  if (!existsSync(join(DIST, 'index.js'))) throw new Error('dist/index.js is missing: run `npm run build` first');
  cpSync(DIST, join(copy, 'dist'), { recursive: true });
  writeFileSync(join(copy, 'package.json'), '{ "name": "oncely", "type": "module" }\n');
  B = (await import(pathToFileURL(join(copy, 'dist', 'index.js')).href)) as Copy;
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('OncelyError.is across two installed copies', () => {
  it("knows the other copy's errors, its subclasses too, where instanceof does not", () => {
    const theirs = [
      new B.OncelyError('KEY_INVALID', 'x'),
      new B.KeyReusedError(record()),
      new B.InvalidArgumentError('x'),
    ];
    expect(B.OncelyError).not.toBe(OncelyError);
    expect(theirs.map((e) => e instanceof OncelyError)).toEqual([false, false, false]);
    expect(theirs.map((e) => OncelyError.is(e))).toEqual([true, true, true]);
    expect(B.OncelyError.is(new OncelyError('CLOSED', 'x'))).toBe(true);
    // Its own still pass instanceof.
    expect(new B.KeyInvalidError('x')).toBeInstanceOf(B.OncelyError);
  });

  it('refuses look-alikes: an Error with a code, a plain object, null', () => {
    const lookAlikes = [Object.assign(new Error('x'), { code: 'KEY_INVALID' }), { code: 'KEY_INVALID' }, null, 'x'];
    expect(lookAlikes.map((e) => OncelyError.is(e))).toEqual([false, false, false, false]);
  });
});

describe("oncely's own checks across two copies", () => {
  let app: RunningHost;
  beforeAll(async () => {
    app = await startHost(join(dir, 'app.db'), {
      handlers: {
        // The handler's module imported the other copy: its refusal is still the caller's fault.
        'orders.create': {
          idempotency: { required: false },
          handle: async () => {
            throw new B.OncelyError('KEY_INVALID', 'the order id is not a usable key');
          },
        },
      },
    });
  });
  afterAll(() => app?.stop());

  it("a host handler's OncelyError of the other copy is answered 400 KEY_INVALID, not 500 HANDLER_FAILED", async () => {
    const refused = await app.invoke('orders.create', {});
    expect(refused).toMatchObject({
      status: 400,
      body: { error: { code: 'KEY_INVALID', message: 'the order id is not a usable key' } },
    });
  });

  it("the engine passes on a store's OncelyError of the other copy as it is, not as STORE_UNAVAILABLE", async () => {
    const store = sqliteStore({ path: join(dir, 'records.db') });
    const closed: RecordStore = Object.create(store, {
      insertOrGet: { value: () => Promise.reject(new B.OncelyError('CLOSED', 'the store was closed')) },
    });
    const once = await createOncely({ store: closed });
    try {
      const run = once.run({ action: 'charge', key: 'ORD-1', input: {} }, async () => 'charged');
      await expect(run).rejects.toMatchObject({ code: 'CLOSED', message: 'the store was closed' });
    } finally {
      await store.close();
    }
  });
});

/** A record for the errors that carry one: only the fields their messages read. */
const record = () => ({ key: 'ORD-1', action: 'charge', state: 'succeeded' }) as PublicRecord;
