import { describe, expect, it } from 'vitest';
import type { CrashWindow } from '../../src/engine/hooks.js';
import { createOncely, type OncelyError } from '../../src/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';
import { crashHooks } from '../../src/testing/crash-hooks.js';
import { manualClock } from '../../src/testing/manual-clock.js';

describe('a manual clock drives the engine and the SQLite store', () => {
  it('expires a lease without waiting: the next caller takes over with the same key, the old holder is fenced off', async () => {
    const clock = manualClock();
    const once = await createOncely({
      store: sqliteStore({ path: ':memory:', clock }),
      clock,
      defaults: { lease: '30s' },
    });
    let release!: () => void;
    const held = new Promise<void>((r) => {
      release = r;
    });
    const first = once.run({ action: 'charge', key: 'ORD-1:charge' }, async () => {
      await held;
      return 'first';
    });
    await expect.poll(async () => (await once.get('charge', 'ORD-1:charge'))?.state).toBe('in_progress');
    const early = await once.run({ action: 'charge', key: 'ORD-1:charge' }, () => 'early').catch((e: OncelyError) => e);
    expect(early).toMatchObject({ code: 'IN_PROGRESS' });
    clock.advance('31s');
    const second = await once.run({ action: 'charge', key: 'ORD-1:charge' }, () => 'second');
    expect(second).toMatchObject({ value: 'second', replayed: false, record: { fence: 2, attempts: 2 } });
    release();
    await expect(first).rejects.toMatchObject({ code: 'LEASE_LOST' });
    await once.close();
  });

  it('expires a finished record after its TTL by the manual clock, and purges it', async () => {
    const clock = manualClock();
    const once = await createOncely({ store: sqliteStore({ path: ':memory:', clock }), clock });
    let runs = 0;
    const call = () => once.run({ action: 'mail', key: 'm-1', ttl: '1h' }, () => ++runs);
    await call();
    clock.advance('59m');
    expect(await call()).toMatchObject({ value: 1, replayed: true });
    clock.advance('2m');
    expect(await once.purgeExpired()).toBe(1);
    expect(await call()).toMatchObject({ value: 2, replayed: false });
    expect(runs).toBe(2);
    await once.close();
  });

  it('refuses to move backwards with INVALID_ARGUMENT', () => {
    const clock = manualClock(1_000);
    expect(() => clock.set(999)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    expect(() => clock.advance(-1)).toThrow(expect.objectContaining({ code: 'INVALID_ARGUMENT' }));
    clock.advance('2s');
    expect(clock.now()).toBe(3_000);
  });
});

describe('test hooks', () => {
  it('are called at each window of an execution, in order, and never on a replay', async () => {
    const seen: string[] = [];
    const once = await createOncely({
      store: sqliteStore({ path: ':memory:' }),
      hooks: async (window: CrashWindow, call) => {
        seen.push(`${window} ${call.key} ${call.fence}`);
      },
    });
    await once.run({ action: 'a', key: 'k' }, () => {
      seen.push('fn');
      return 1;
    });
    await once.run({ action: 'a', key: 'k' }, () => 2);
    expect(seen).toEqual(['claimed k 1', 'before-effect k 1', 'fn', 'after-effect k 1', 'completed k 1']);
    await once.close();
  });

  it('a hook that throws at a window fails the call there: the claim is released, the effect never ran', async () => {
    let ran = 0;
    const once = await createOncely({
      store: sqliteStore({ path: ':memory:' }),
      hooks: (window) => {
        if (window === 'before-effect') throw new Error('stop here');
      },
    });
    await expect(once.run({ action: 'a', key: 'k' }, () => ++ran)).rejects.toThrow('stop here');
    expect(ran).toBe(0);
    expect((await once.get('a', 'k'))?.state).toBe('released');
    await once.close();
  });
});

describe('crashHooks', () => {
  it('is undefined outside a crash test, and refuses a window it does not know with INVALID_ARGUMENT', () => {
    expect(crashHooks({})).toBeUndefined();
    expect(() => crashHooks({ ONCELY_CRASH_AT: 'halfway' })).toThrow(
      expect.objectContaining({ code: 'INVALID_ARGUMENT' }),
    );
    expect(typeof crashHooks({ ONCELY_CRASH_AT: 'after-effect' })).toBe('function');
  });
});
