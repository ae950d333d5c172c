import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Duration } from '../../src/core/duration.js';
import { durationOption } from '../../src/core/duration-option.js';
import type { OncelyError } from '../../src/core/errors.js';
import { until } from '../support/wait.js';

// Names of this file only: the warnings are once per process, and other files may use the real ones.
interface Options {
  lease?: Duration;
  leaseTestMs?: number;
  poll?: Duration;
  pollTestMs?: number;
  backoff?: Duration;
  backoffTestMs?: number;
}

const refusal = (fn: () => unknown) => {
  try {
    fn();
  } catch (error) {
    return { code: (error as OncelyError).code, message: (error as Error).message };
  }
  return 'no error';
};

const deprecations = (spy: { mock: { calls: unknown[][] } }, code: string) =>
  spy.mock.calls.filter(([, options]) => (options as { code?: string } | undefined)?.code === code).length;

afterEach(() => {
  vi.restoreAllMocks();
});

describe('durationOption', () => {
  it('reads the new name as a Duration, the fallback when neither name is given, without a warning', () => {
    const spy = vi.spyOn(process, 'emitWarning');
    expect(durationOption<Options>({ lease: '30s' }, 'lease', 'leaseTestMs', '5s', 'test')).toBe(30_000);
    expect(durationOption<Options>({ lease: 250 }, 'lease', 'leaseTestMs', '5s', 'test')).toBe(250);
    expect(durationOption<Options>({}, 'lease', 'leaseTestMs', '5s', 'test')).toBe(5_000);
    expect(durationOption<Options>({ lease: undefined }, 'lease', 'leaseTestMs', 40, 'test')).toBe(40);
    expect(spy).not.toHaveBeenCalled();
  });

  it('reads the old milliseconds name and warns once per old name per process, even from a second copy', async () => {
    const spy = vi.spyOn(process, 'emitWarning');
    const seen: Error[] = [];
    const listen = (warning: Error) => seen.push(warning);
    process.on('warning', listen);
    try {
      for (const ms of [1_500, 2_500, 3_500])
        expect(durationOption<Options>({ pollTestMs: ms }, 'poll', 'pollTestMs', '1s', 'the poller')).toBe(ms);
      expect(durationOption<Options>({ backoffTestMs: 20 }, 'backoff', 'backoffTestMs', '1s', 'the poller')).toBe(20);
      // A second loaded copy of oncely (the sources beside dist) shares the record of warnings given.
      vi.resetModules();
      const copy = await import('../../src/core/duration-option.js');
      expect(copy.durationOption).not.toBe(durationOption);
      expect(copy.durationOption<Options>({ pollTestMs: 7 }, 'poll', 'pollTestMs', '1s', 'another poller')).toBe(7);

      expect(deprecations(spy, 'ONCELY_DEP_POLL_TEST_MS')).toBe(1);
      expect(deprecations(spy, 'ONCELY_DEP_BACKOFF_TEST_MS')).toBe(1);
      const warning = await until('the DeprecationWarning of pollTestMs', () =>
        seen.find((w) => (w as Error & { code?: string }).code === 'ONCELY_DEP_POLL_TEST_MS'),
      );
      expect(warning?.name).toBe('DeprecationWarning');
      expect(warning?.message).toBe(
        "the poller: pollTestMs is deprecated and goes in oncely 0.2.0; write poll instead ('30s', or milliseconds)",
      );
    } finally {
      process.off('warning', listen);
    }
  });

  it('takes both names when they agree, and refuses them when they differ, with the code asked for', () => {
    expect(durationOption<Options>({ lease: '2s', leaseTestMs: 2_000 }, 'lease', 'leaseTestMs', '5s', 'test')).toBe(
      2_000,
    );
    expect(
      refusal(() =>
        durationOption<Options>({ lease: '2s', leaseTestMs: 3_000 }, 'lease', 'leaseTestMs', '5s', 'relay'),
      ),
    ).toEqual({
      code: 'INVALID_ARGUMENT',
      message: 'relay: lease and its old name leaseTestMs are both given, with different values',
    });
    expect(
      refusal(() =>
        durationOption<Options>({ lease: 1, leaseTestMs: 3 }, 'lease', 'leaseTestMs', '5s', 'config', 'CONFIG_INVALID'),
      ),
    ).toMatchObject({ code: 'CONFIG_INVALID' });
  });

  it('refuses a value that is no duration, under either name, naming where and the option', () => {
    expect(
      refusal(() => durationOption<Options>({ lease: '30 sec' as Duration }, 'lease', 'leaseTestMs', 1, 'relay')),
    ).toEqual({
      code: 'INVALID_ARGUMENT',
      message: "relay: lease must look like '500ms', '30s', '5m', '24h' or '7d', got 30 sec",
    });
    expect(refusal(() => durationOption<Options>({ leaseTestMs: -1 }, 'lease', 'leaseTestMs', 1, 'relay'))).toEqual({
      code: 'INVALID_ARGUMENT',
      message: 'relay: leaseTestMs must be a non-negative number of milliseconds, got -1',
    });
    expect(
      refusal(() =>
        durationOption<Options>({ lease: Number.NaN }, 'lease', 'leaseTestMs', 1, 'config', 'CONFIG_INVALID'),
      ),
    ).toEqual({
      code: 'CONFIG_INVALID',
      message: 'config: lease must be a non-negative number of milliseconds, got NaN',
    });
  });
});
