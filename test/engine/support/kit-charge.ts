/**
 * The charge the across-processes suite crashes with oncely/testing's crashWindows: the engine on
 * the suite's store (built with crashHooks(), so the kit's child dies at the window it names),
 * posting to a recordingDownstream under the record's key.
 */
import { createOncely, type Oncely } from '../../../src/index.js';
import { crashHooks } from '../../../src/testing/index.js';
import { openStore, type StoreSpec } from '../../support/stores.js';

export interface KitCharge {
  store: StoreSpec;
  action: string;
  key: string;
  gateway: string;
  lease: number;
  onLeaseExpired: 'retry' | 'hold';
}

let once: Promise<Oncely> | undefined;

export async function charge(input: KitCharge) {
  once ??= createOncely({
    store: openStore(input.store),
    tenant: 'acme',
    hooks: crashHooks(),
    defaults: { lease: input.lease },
  });
  return (await once).run(
    { action: input.action, key: input.key, onLeaseExpired: input.onLeaseExpired },
    async (ctx) => {
      await fetch(`${input.gateway}/charges`, { method: 'POST', headers: { 'idempotency-key': ctx.idempotencyKey } });
      return { attempt: ctx.attempt };
    },
  );
}
