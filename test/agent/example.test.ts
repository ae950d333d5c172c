/** Runs examples/agent: the scripted agent's duplicates, parallel calls, lost answer and rephrasing send one e-mail. */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { main } from '../../examples/agent/agent.js';

describe('examples/agent', () => {
  it('one e-mail sent, one credit charged, and the transcript shows already_sent', async () => {
    const db = join(mkdtempSync(join(tmpdir(), 'oncely-agent-example-test-')), 'agent.db');
    const { transcript, summary } = await main({ db });
    expect(summary).toEqual({ calls: 7, emailsSent: 1, creditsCharged: 1, states: { already_sent: 6 } });
    const calls = transcript.filter((line) => /^#\d+ sendReviewNotice\(/.test(line));
    expect(calls).toHaveLength(7);
    expect(calls[0]).toMatch(/no answer after \d+ms/);
    for (const line of calls.slice(1)) expect(line).toMatch(/-> already_sent, nextAction=continue/);
    expect(transcript.some((line) => /rephrased body/.test(line) && /already_sent/.test(line))).toBe(true);
    expect(transcript).toContain('#1 (its answer, which the model never saw) -> sent, nextAction=continue');
    expect(transcript).toContain('summary: 7 calls, emails sent 1, credits charged 1');
    // A second run on the same file is a new tenant: it sends its own one e-mail.
    expect((await main({ db })).summary).toMatchObject({ emailsSent: 1, creditsCharged: 1 });
  });
});
