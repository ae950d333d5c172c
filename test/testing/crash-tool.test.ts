/**
 * crashWindows on an agent tool: the runtime's process killed with SIGKILL at each window, the
 * model's repeated call made from a fresh process; the mailer (a recordingDownstream) sees one notice.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  crashWindows,
  type RecordingDownstream,
  recordingDownstream,
  StormFailedError,
} from '../../src/testing/index.js';
import type { NoticeInput } from './fixtures/notice.js';

const module = fileURLToPath(new URL('./fixtures/notice.ts', import.meta.url));
let mailer: RecordingDownstream;
beforeAll(async () => {
  mailer = await recordingDownstream();
});
afterAll(() => mailer.close());

describe('crashWindows on an agent tool', () => {
  it('sendNotice killed at every window: the repeated call takes over with the same key or gets already_sent; one notice each', async () => {
    const db = join(mkdtempSync(join(tmpdir(), 'oncely-crash-tool-')), 'agent.db');
    const input = (window: string): NoticeInput => ({ db, mailer: mailer.url, taskId: `T-${window}` });
    const notices = (_: string, i: unknown) =>
      mailer.effects.filter((e) => (e.body as { taskId: string }).taskId === (i as NoticeInput).taskId).length;
    const report = await crashWindows({
      name: 'sendNotice',
      child: { module, export: 'notice' },
      input,
      effects: notices,
    });
    console.log(report.table);
    expect(report.cases.map((c) => [c.window, c.crashed, c.got, c.effects])).toEqual([
      ['claimed', true, 'taken over', 1],
      ['before-effect', true, 'taken over', 1],
      ['after-effect', true, 'taken over', 1],
      ['completed', true, 'replayed', 1],
    ]);
    // Killed after the send: the takeover sent the same key again, and the mailer's dedupe held it to one.
    const sent = mailer.calls.filter((c) => (c.body as { taskId?: string } | undefined)?.taskId === 'T-after-effect');
    expect(new Set(sent.map((c) => c.key)).size).toBe(1);
    expect(sent).toHaveLength(2);
  }, 90_000);

  it('catches a tool that gives the mailer a random key of its own: the second notice, named by its window', async () => {
    const db = join(mkdtempSync(join(tmpdir(), 'oncely-crash-tool-')), 'agent.db');
    const input: NoticeInput = { db, mailer: mailer.url, taskId: 'T-random', randomMailerKey: true };
    const failure = await crashWindows({
      child: { module, export: 'notice' },
      windows: ['after-effect'],
      input: () => input,
      effects: () => mailer.effects.filter((e) => (e.body as { taskId: string }).taskId === 'T-random').length,
    }).catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(StormFailedError);
    expect((failure as Error).message).toContain("the crash at 'after-effect' produced a second effect (2");
  }, 60_000);
});
