/**
 * A real downstream for the reconcile tests: a payment gateway on node:http that charges once per
 * idempotency key (`POST /charges/:key`) and answers `GET /charges/:key` with the charge or 404,
 * and the charge action that calls it, with the reconcile function that asks it.
 */
import type { Reconcile } from '../../../src/engine/reconcile.js';
import { type DownstreamEffect, recordingDownstream } from '../../../src/testing/index.js';

/** One charge the gateway made. */
export interface Charge {
  id: string;
  key: string;
  amount: number;
}

/** The gateway, listening: its URL, what it charged, how often each key was posted. */
export interface Gateway {
  url: string;
  charges: Map<string, Charge>;
  posts(key: string): number;
  close(): Promise<void>;
}

const chargeOf = (effect: DownstreamEffect): Charge => ({
  id: `ch_${effect.id.slice('eff_'.length)}`,
  key: effect.key as string,
  amount: (effect.body as { amount: number }).amount,
});

/** Starts the gateway on a free port of 127.0.0.1: oncely/testing's recordingDownstream, keyed by the path. */
export async function startGateway(): Promise<Gateway> {
  const downstream = await recordingDownstream({
    keyOf: ({ path }) => {
      const match = /^\/charges\/([^/]+)$/.exec(path);
      return match ? decodeURIComponent(match[1] as string) : undefined;
    },
    answer: chargeOf,
  });
  return {
    url: downstream.url,
    get charges() {
      return new Map(downstream.effects.map((e) => [e.key as string, chargeOf(e)]));
    },
    posts: (key) => downstream.calls.filter((c) => c.method === 'POST' && c.key === key).length,
    close: downstream.close,
  };
}

/** Charges `amount` under the call's idempotency key; answers what the action stores. */
export async function charge(url: string, key: string, amount: number): Promise<{ chargeId: string; amount: number }> {
  const res = await fetch(`${url}/charges/${encodeURIComponent(key)}`, {
    method: 'POST',
    body: JSON.stringify({ amount }),
  });
  const made = (await res.json()) as Charge;
  return { chargeId: made.id, amount: made.amount };
}

/** Asks the gateway by the record's key: the charge as the action would have stored it, or 'retry' when there is none. */
export function reconcileCharge(url: string): Reconcile {
  return async (record) => {
    const res = await fetch(`${url}/charges/${encodeURIComponent(record.key)}`);
    if (res.status === 404) return 'retry';
    if (!res.ok) return 'unknown';
    const made = (await res.json()) as Charge;
    return { value: { chargeId: made.id, amount: made.amount } };
  };
}
