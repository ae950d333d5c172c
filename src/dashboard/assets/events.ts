/** The events: dead letters with their replays, and the recent events. */
import { type Act, change, type DeadLetter, read } from './api.js';
import { type Child, h } from './dom.js';
import { when } from './format.js';
import { filters, more, query, row, table } from './widgets.js';

/** The events page, filtered by the hash's parameters. */
export async function events(params: URLSearchParams, act: Act): Promise<Child[]> {
  const [page, dead] = await Promise.all([
    read.events(query(params, ['status', 'source', 'cursor'])),
    read.deadLetters(query(params, ['source'])),
  ]);
  const replay = (e: DeadLetter) =>
    h('button', {
      type: 'button',
      text: `Replay ${e.eventId}`,
      onclick: () =>
        act(
          `Replay ${e.source}/${e.eventId}? Its consumer runs again from attempt 0.`,
          () => change.replay({ source: e.source, id: e.eventId }),
          (d) => `Replayed ${d.replayed}.`,
        ),
    });
  return [
    h('h2', { text: 'Events' }),
    filters('events', params, [
      ['status', 'Status', ['pending', 'processing', 'waiting', 'applied', 'stale', 'dead', 'no_consumer']],
      ['source', 'Source'],
    ]),
    table(
      'Dead letters',
      ['Event', 'Type', 'Attempts', 'Last error', ''],
      dead.deadLetters.map((e) => row(`${e.source}/${e.eventId}`, e.type, String(e.attempts), e.lastError, replay(e))),
      'dead-letters',
    ),
    dead.deadLetters.length > 0
      ? h('button', {
          type: 'button',
          text: 'Replay all dead letters',
          onclick: () =>
            act(
              'Replay every dead letter?',
              () => change.replay({ all: true }),
              (d) => `Replayed ${d.replayed}.`,
            ),
        })
      : null,
    table(
      'Recent events, newest first',
      ['Event', 'Type', 'Status', 'Attempts', 'Received'],
      page.events.map((e) => row(`${e.source}/${e.eventId}`, e.type, e.status, String(e.attempts), when(e.receivedAt))),
      'events',
    ),
    more('events', params, page.cursor),
  ];
}
