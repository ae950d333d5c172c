import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { type PublicRecord, recordRef } from '../../src/core/record.js';
import { createOncely, fingerprint, type RecordStore, type StoredRecord } from '../../src/index.js';
import { postgresStore } from '../../src/postgres/index.js';
import { redisStore } from '../../src/redis/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';
import { CLI_MAIN } from '../support/cli.js';
import { dropSchema, freshSchema, POSTGRES_URL } from '../support/postgres.js';
import { connectRedis, dropPrefix, freshPrefix, REDIS_URL, seedOtherKeys } from '../support/redis.js';
import { SELECTED_STORES, type StoreName, selectStores } from '../support/store-filter.js';

const run = promisify(execFile);
const CLI = [CLI_MAIN];

/** Runs `oncely ...`; a failure is its exit code and stderr, not a rejection. */
async function oncely(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, [...CLI, ...args]);
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code?: number; stdout: string; stderr: string };
    return { code: failed.code ?? -1, stdout: failed.stdout, stderr: failed.stderr };
  }
}

const MINUTE = 60_000;
const dir = mkdtempSync(join(tmpdir(), 'oncely-records-cli-'));
const cleanups: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups) await cleanup();
  rmSync(dir, { recursive: true, force: true });
});

/** Each store as the CLI reaches it, and as the test writes to it. */
const TARGETS = selectStores<{
  name: StoreName;
  title: string;
  open(): { store: RecordStore; args: string[]; also?: string[] };
}>([
  {
    name: 'sqlite',
    title: 'SQLite',
    open() {
      const path = join(dir, `${randomUUID()}.db`);
      return { store: sqliteStore({ path }), args: ['--db', path] };
    },
  },
  {
    name: 'postgres',
    title: 'PostgreSQL',
    open() {
      const schema = freshSchema();
      cleanups.push(() => dropSchema(schema));
      return {
        store: postgresStore({ connectionString: POSTGRES_URL, schema, table: 'oncely_records' }),
        args: ['--db', POSTGRES_URL, '--schema', schema],
        // The schema as the host's --db names it elsewhere.
        also: ['--db', `${POSTGRES_URL}?schema=${schema}`],
      };
    },
  },
  {
    name: 'redis',
    title: 'Redis',
    open() {
      const prefix = freshPrefix();
      cleanups.push(async () => {
        const client = await connectRedis();
        await dropPrefix(client, prefix);
        await client.quit();
      });
      return { store: redisStore({ url: REDIS_URL, prefix }), args: ['--store', REDIS_URL, '--prefix', prefix] };
    },
  },
]);

/** A record whose holder vanished under 'hold': unknown, last written `minutes` ago. */
function unknown(tenant: string, action: string, key: string, minutes: number): StoredRecord {
  const at = Date.now() - minutes * MINUTE;
  return {
    tenant,
    action,
    key,
    state: 'unknown',
    fingerprint: fingerprint({ key }),
    fence: 1,
    attempts: 1,
    leaseUntil: null,
    result: null,
    traceId: randomUUID(),
    createdAt: at,
    updatedAt: at,
    completedAt: null,
    expiresAt: null,
  };
}

// Each store's test waits on a dozen CLI processes in turn: the three stores run side by side.
describe.concurrent('oncely records on each store', () => {
  for (const target of TARGETS) {
    describe(`oncely records on ${target.title}`, () => {
      it('lists by state, tenant, action and age with cursors, shows a record, and settles records with who did', async () => {
        const { store, args, also = args } = target.open();
        const once = await createOncely({ store, tenant: 'acme' });
        await once.run({ action: 'charge', key: 'ORD-1', input: { key: 'ORD-1' } }, () => ({ charged: 1 }));
        // A key with '/' and ':' shows the id's percent-encoding.
        const odd = unknown('acme', 'charge', 'ORD-2/pay:1', 30);
        for (const record of [odd, unknown('acme', 'charge', 'ORD-3', 5), unknown('beta', 'refund', 'R-1', 20)])
          expect((await store.insertOrGet(record)).inserted).toBe(true);

        const json = await oncely('records', 'list', ...args, '--state', 'unknown', '--json');
        expect(json.stderr).toBe('');
        const page = JSON.parse(json.stdout) as { records: PublicRecord[]; cursor: string | null };
        expect(page.cursor).toBeNull();
        expect(page.records.map(recordRef).sort()).toEqual([
          'acme/charge/ORD-2%2Fpay%3A1',
          'acme/charge/ORD-3',
          'beta/refund/R-1',
        ]);
        expect(page.records[0]).not.toHaveProperty('result');

        // Pages of one: each line a record, then the cursor of the next page.
        const seen: string[] = [];
        let cursor: string[] = [];
        for (let pages = 0; pages < 5; pages++) {
          const out = await oncely('records', 'list', ...args, '--state', 'unknown', '--limit', '1', ...cursor);
          expect(out.code).toBe(0);
          const lines = out.stdout.trim().split('\n');
          if (lines[0] === 'no records') break;
          expect(lines).toHaveLength(2);
          seen.push(lines[0] as string);
          const next = /^next page: --cursor (\S+)$/.exec(lines[1] as string);
          if (!next) {
            expect(lines[1]).toBe('end of the records');
            break;
          }
          cursor = ['--cursor', next[1] as string];
        }
        expect(seen).toHaveLength(3);
        const oddLine = seen.find((line) => line.startsWith('acme/charge/ORD-2%2Fpay%3A1  '));
        expect(oddLine).toMatch(
          new RegExp(
            `^acme/charge/ORD-2%2Fpay%3A1  unknown  attempts 1  age 30m\\d*s?  updated ${new Date(odd.updatedAt).toISOString()}$`,
          ),
        );

        const filtered = async (...filters: string[]) =>
          JSON.parse((await oncely('records', 'list', ...args, '--json', ...filters)).stdout)
            .records.map(recordRef)
            .sort();
        expect(await filtered('--state', 'unknown', '--older-than', '10m')).toEqual([
          'acme/charge/ORD-2%2Fpay%3A1',
          'beta/refund/R-1',
        ]);
        expect(await filtered('--tenant', 'acme', '--action', 'charge')).toEqual([
          'acme/charge/ORD-1',
          'acme/charge/ORD-2%2Fpay%3A1',
          'acme/charge/ORD-3',
        ]);
        expect(await filtered('--state', 'succeeded')).toEqual(['acme/charge/ORD-1']);

        const shown = await oncely('records', 'show', ...args, 'acme/charge/ORD-2%2Fpay%3A1', '--json');
        expect(JSON.parse(shown.stdout)).toMatchObject({ key: 'ORD-2/pay:1', state: 'unknown', traceId: odd.traceId });
        expect((await oncely('records', 'show', ...also, 'beta/refund/R-1')).stdout).toMatch(
          /^beta\/refund\/R-1 {2}unknown {2}/,
        );

        // Settled: a value, an error and a retry, each keeping who settled it.
        const paid = await oncely(
          'records',
          'resolve',
          ...args,
          'acme/charge/ORD-2%2Fpay%3A1',
          '--value',
          '{"charged":2}',
          '--by',
          'alice',
          '--note',
          'PSP ref 77',
        );
        expect(paid.stdout.trim()).toMatch(
          /^acme\/charge\/ORD-2%2Fpay%3A1 {2}succeeded {2}.* {2}settled value by alice at \S+Z \(PSP ref 77\)$/,
        );
        expect(
          await once.run({ action: 'charge', key: 'ORD-2/pay:1', input: { key: 'ORD-2/pay:1' } }, () => 'ran again'),
        ).toMatchObject({ replayed: true, value: { charged: 2 } });
        const declined = await oncely(
          'records',
          'resolve',
          ...args,
          'beta/refund/R-1',
          '--error',
          '{"message":"refund refused","code":"REFUSED"}',
          '--by',
          'bob',
        );
        expect(declined.code).toBe(0);
        await expect(
          once.run({ action: 'refund', key: 'R-1', tenant: 'beta', input: { key: 'R-1' } }, () => 1),
        ).rejects.toMatchObject({
          message: 'refund refused',
          code: 'REFUSED',
        });
        expect(
          (await oncely('records', 'resolve', ...args, 'acme/charge/ORD-3', '--retry', '--by', 'carol')).code,
        ).toBe(0);
        expect(await once.run({ action: 'charge', key: 'ORD-3', input: { key: 'ORD-3' } }, () => 'ran')).toMatchObject({
          replayed: false,
          value: 'ran',
        });
        const settled = JSON.parse((await oncely('records', 'list', ...args, '--json', '--tenant', 'beta')).stdout);
        expect(settled.records[0].settlement).toEqual({ by: 'bob', at: expect.any(Number), answer: 'error' });
        expect(
          JSON.parse((await oncely('records', 'list', ...args, '--state', 'unknown', '--json')).stdout).records,
        ).toEqual([]);

        // Refusals: one line, exit code 1.
        const refused = await oncely('records', 'resolve', ...args, 'acme/charge/ORD-1', '--value', '1');
        expect([refused.code, refused.stderr.trim()]).toEqual([
          1,
          'oncely: record is succeeded; only unknown or stalled records can be resolved',
        ]);
        const missing = await oncely('records', 'show', ...args, 'acme/charge/ORD-404');
        expect([missing.code, missing.stderr.trim()]).toEqual([1, 'oncely: no record acme/charge/ORD-404']);
        const badCursor = await oncely('records', 'list', ...args, '--cursor', 'not-a-cursor');
        expect([badCursor.code, badCursor.stderr.trim()]).toEqual([
          1,
          'oncely: cursor must be the cursor of a previous page',
        ]);
        await once.close();
      }, 120_000);
    });
  }
});

describe('oncely records: bad input', () => {
  it('refuses a missing or doubled store, a bad id, a bad limit, a resolution that is not one, and JSON that is not', async () => {
    const path = join(dir, 'bad-input.db');
    const store = sqliteStore({ path });
    await store.migrate();
    await store.close();
    const cases: [string[], RegExp][] = [
      [['records', 'list'], /^oncely: give the records as --db <sqlite path \| postgres url> or --store <redis url>$/],
      [['records', 'list', '--db', path, '--store', REDIS_URL], /^oncely: give the records as --db/],
      [['records', 'list', '--db', join(dir, 'typo.db')], /^oncely: no database at .*typo\.db$/],
      [['records', 'list', '--store', 'http://localhost'], /^oncely: --store must be a redis:\/\/ URL/],
      [
        ['records', 'list', '--store', REDIS_URL, '--schema', 'shop'],
        /^oncely: --schema applies to a postgres --db only$/,
      ],
      [['records', 'list', '--db', path, '--schema', 'shop'], /^oncely: --schema applies to a postgres --db only$/],
      [['records', 'list', '--db', path, '--limit', '0'], /^oncely: limit must be a whole number from 1 to 1000$/],
      [['records', 'list', '--db', path, '--limit', '1001'], /^oncely: limit must be a whole number from 1 to 1000$/],
      [['records', 'list', '--db', path, '--state', 'lost'], /^oncely: state must be one of /],
      [['records', 'list', '--db', path, '--older-than', 'soon'], /^oncely: .*olderThan/],
      [['records', 'show', '--db', path, 'no-slashes'], /^oncely: no-slashes is not a record id/],
      [
        ['records', 'resolve', '--db', path, 'a/b/c'],
        /^oncely: give exactly one of --value <json>, --error <json> or --retry$/,
      ],
      [['records', 'resolve', '--db', path, 'a/b/c', '--value', '1', '--retry'], /^oncely: give exactly one of/],
      [['records', 'resolve', '--db', path, 'a/b/c', '--value', 'ok'], /^oncely: --value must be JSON/],
      [['records', 'resolve', '--db', path, 'a/b/c', '--error', '"boom"'], /^oncely: --error must be a JSON object/],
      [['records', 'resolve', '--db', path, 'a/b/c', '--retry'], /^oncely: no record for key "c" of action "b"$/],
      [
        ['records', 'list', '--db', POSTGRES_URL, '--schema', freshSchema()],
        /^oncely: no oncely records in .*: run oncely migrate or serve on it first$/,
      ],
    ];
    // Four at a time: each is a Node process loading the CLI.
    const results: Awaited<ReturnType<typeof oncely>>[] = [];
    for (let i = 0; i < cases.length; i += 4)
      results.push(...(await Promise.all(cases.slice(i, i + 4).map(([args]) => oncely(...args)))));
    results.forEach((result, i) => {
      const [args, message] = cases[i] as [string[], RegExp];
      expect(result.code, args.join(' ')).toBe(1);
      expect(result.stderr.trim(), args.join(' ')).toMatch(message);
      expect(result.stderr.trim().split('\n'), args.join(' ')).toHaveLength(1);
    });
  }, 120_000);
});

if (SELECTED_STORES.has('redis'))
  describe('oncely records list --store in a lived-in Redis', () => {
    it('review3.9: shows all 5 records of a tenant among 200,000 keys of another application, in one page', async () => {
      const client = await connectRedis();
      const prefix = freshPrefix();
      const other = await seedOtherKeys(client, `other-app:${randomUUID().slice(0, 8)}:`, 200_000);
      try {
        const store = redisStore({ url: REDIS_URL, prefix });
        const once = await createOncely({ store, tenant: 'acme' });
        for (const key of ['A-1', 'A-2', 'A-3', 'A-4', 'A-5'])
          await once.run({ action: 'charge', key, tenant: 'five', input: { key } }, () => ({ charged: key }));
        await once.run({ action: 'charge', key: 'B-1', tenant: 'other', input: {} }, () => 1);
        await once.close();
        const out = await oncely('records', 'list', '--store', REDIS_URL, '--prefix', prefix, '--tenant', 'five');
        expect(out.stderr).toBe('');
        const lines = out.stdout.trim().split('\n');
        expect(
          lines
            .slice(0, 5)
            .map((line) => line.split(' ')[0])
            .sort(),
        ).toEqual(['A-1', 'A-2', 'A-3', 'A-4', 'A-5'].map((key) => `five/charge/${key}`));
        expect(lines.slice(5)).toEqual(['end of the records']);
      } finally {
        await other.drop();
        await dropPrefix(client, prefix);
        await client.quit();
      }
    }, 120_000);
  });
