/** Runs examples/agent/dispatch: one task to two sub-agents and a re-dispatch send one e-mail in the business tenant's scope. */
import { describe, expect, it } from 'vitest';
import { main } from '../../examples/agent/dispatch.js';

describe('examples/agent/dispatch', () => {
  it("in the business tenant's scope: one e-mail, one credit; every sub-agent sees sent or already_sent with the task's trace", async () => {
    const { transcript, summary } = await main();
    expect(summary).toEqual({ emailsSent: 1, creditsCharged: 1, states: { sent: 1, already_sent: 2 } });
    expect(transcript).toContain('orchestrator: no answer from drafter after 50ms; re-dispatching');
    expect(transcript.filter((l) => /-> (sent|already_sent), nextAction=continue, trace kept/.test(l))).toHaveLength(3);
    expect(transcript.filter((l) => l.startsWith('         e-mail to u-3'))).toHaveLength(1);
  });

  it("in each agent's own scope (the mistake the README warns of): each sub-agent sends its own e-mail", async () => {
    const { summary } = await main({ scope: 'agent' });
    expect(summary).toEqual({ emailsSent: 3, creditsCharged: 3, states: { sent: 3 } });
  });
});
