import { describe, expect, it } from 'vitest';
import { createOncely } from '../../src/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';

describe('action and tenant names of a call', () => {
  it('are checked on every call, also right after a valid one, and a refused call never runs', async () => {
    const once = await createOncely({ store: sqliteStore({ path: ':memory:' }) });
    let runs = 0;
    const run = (action: unknown, tenant?: unknown) =>
      once.run({ action: action as string, tenant: tenant as string, key: 'k' }, () => ++runs);
    // On a fresh engine, before any name was accepted.
    await expect(run('')).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect((await run('charge')).value).toBe(1);
    for (const bad of ['', '   ', 'tab\there', 'x'.repeat(129), 7, undefined]) {
      await expect(run(bad)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
      await expect(run('charge', bad === undefined ? null : bad)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    }
    expect((await run('charge')).replayed).toBe(true);
    expect(runs).toBe(1);
    await once.close();
  });
});

describe('trace and request ids a caller gives', () => {
  it('are bounded printable ASCII; a bad one is TRACE_ID_INVALID and never runs or claims', async () => {
    const once = await createOncely({ store: sqliteStore({ path: ':memory:' }) });
    let runs = 0;
    const run = (ids: { traceId?: unknown; requestId?: unknown }) =>
      once.run({ action: 'charge', key: 'k', ...(ids as { traceId?: string; requestId?: string }) }, () => ++runs);
    for (const bad of ['', 'has space', 'x'.repeat(129), 'tab\there', 'é', 7]) {
      await expect(run({ traceId: bad })).rejects.toMatchObject({ code: 'TRACE_ID_INVALID' });
      await expect(run({ requestId: bad })).rejects.toMatchObject({ code: 'TRACE_ID_INVALID' });
    }
    expect(await once.get('charge', 'k')).toBeNull();
    const first = await run({ traceId: 'x'.repeat(128), requestId: 'req-1' });
    expect(first.record.traceId).toBe('x'.repeat(128));
    expect(runs).toBe(1);
    await once.close();
  });
});
