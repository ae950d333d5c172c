/**
 * `effects: 'external'` in one process, on SQLite and PostgreSQL: a handler that throws has its
 * transaction rolled back and its claim released (or its failure stored, per onError) in a
 * transaction of its own; an outcome refused by the fence (the claim taken over meanwhile) rolls
 * the handler's writes back with it.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { OncelyError } from '../../src/core/errors.js';
import { claimDeclarations } from '../../src/host/app.js';
import type { HostContext } from '../../src/host/context.js';
import { handlerAction } from '../../src/host/invoke.js';
import { hostTargets, type RunningHost, startHost } from '../support/host-app.js';
import { until } from '../support/wait.js';

const SCHEMA = 'CREATE TABLE notes (id TEXT PRIMARY KEY, body TEXT NOT NULL);';

for (const { name, target, cleanup } of hostTargets()) {
  describe(`effects 'external' failures on ${name}`, () => {
    const runs = new Map<string, number>();
    let gate: Promise<void> = Promise.resolve();
    let host: RunningHost;
    afterAll(async () => {
      await host?.stop();
      await cleanup();
    });

    const write = (kind: string) => async (input: unknown, ctx: HostContext) => {
      const { id } = input as { id: string };
      runs.set(id, (runs.get(id) ?? 0) + 1);
      const row = await ctx.store.createIfAbsent('notes', { id, body: kind }, ['id']);
      if (!row.ok) throw new Error(row.error.message);
      await gate;
      if (kind === 'declined') throw Object.assign(new Error('card declined'), { status: 402, code: 'CARD_DECLINED' });
      if (kind === 'broken') throw new Error('gateway exploded');
      return { id };
    };

    it('starts', async () => {
      host = await startHost(target(), {
        schemaSql: SCHEMA,
        handlers: {
          'notes.broken': { effects: 'external', handle: write('broken') },
          'notes.declined': { effects: 'external', onError: 'store', handle: write('declined') },
          'notes.fine': { effects: 'external', lease: '5s', handle: write('fine') },
        },
      });
    });

    const call = (handler: string, id: string) =>
      host.invoke(handler, { id }, { 'idempotency-key': `${id}-${handler}` });
    const notes = (id: string) => host.rows('SELECT id FROM notes WHERE id = ?', [id]);

    it('a throw rolls the handler back and releases the claim: the retry executes again', async () => {
      const id = randomUUID();
      const first = await call('notes.broken', id);
      expect(first.status).toBe(500);
      expect(await notes(id)).toEqual([]);
      expect((await host.host.once.get(handlerAction('notes.broken'), `${id}-notes.broken`))?.state).toBe('released');
      expect((await call('notes.broken', id)).status).toBe(500);
      expect(runs.get(id)).toBe(2);
    });

    it("onError 'store': the failure's envelope is stored after the rollback and replayed, without a second run", async () => {
      const id = randomUUID();
      const first = await call('notes.declined', id);
      expect(first.status).toBe(402);
      expect(first.body.error).toEqual({ code: 'CARD_DECLINED', message: 'card declined' });
      expect(await notes(id)).toEqual([]);
      const again = await call('notes.declined', id);
      expect(again.status).toBe(402);
      expect(again.body.error).toEqual({ code: 'CARD_DECLINED', message: 'card declined' });
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(runs.get(id)).toBe(1);
    });

    // On SQLite nobody can take the claim over while the handler's transaction holds the write lock.
    if (name === 'postgres')
      it('a claim taken over while the handler runs: the fenced completion is refused and its writes roll back', async () => {
        const id = randomUUID();
        let open!: () => void;
        gate = new Promise((resolve) => {
          open = resolve;
        });
        const pending = call('notes.fine', id);
        await until('the handler running', () => runs.get(id) !== undefined);
        // Another holder's takeover, committed: the fence moves on.
        const bumped = await host.rows<{ fence: number }>(
          'UPDATE oncely_records SET fence = fence + 1 WHERE key = ? RETURNING fence',
          [`${id}-notes.fine`],
        );
        expect(bumped).toHaveLength(1);
        open();
        const answer = await pending;
        gate = Promise.resolve();
        expect(answer.status).toBe(500);
        expect((answer.body.error as { code: string }).code).toBe('LEASE_LOST');
        expect(await notes(id)).toEqual([]);
      });

    it("declarations are checked: onError and onLeaseExpired need effects 'external'", () => {
      const refused = (module: object) => {
        try {
          claimDeclarations(module, 'handler x');
        } catch (error) {
          return error instanceof OncelyError ? error.code : 'other';
        }
        return 'accepted';
      };
      expect(refused({ onLeaseExpired: 'hold' })).toBe('CONFIG_INVALID');
      expect(refused({ effects: 'external', onLeaseExpired: 'sometimes' })).toBe('CONFIG_INVALID');
      expect(refused({ effects: 'remote' })).toBe('CONFIG_INVALID');
      expect(refused({ lease: '1s', idempotency: { lease: '2s' } })).toBe('CONFIG_INVALID');
      expect(refused({ effects: 'external', onError: 'store', lease: '1s', idempotency: { lease: 1000 } })).toBe(
        'accepted',
      );
    });
  });
}
