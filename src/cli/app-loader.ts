import { register as registerHook } from 'node:module';
import { loadPeer } from '../core/peer.js';

/** Lets the CLI import an app's `.ts` files (through tsx), with their `oncely` imports bound to this CLI's copy. */
export async function registerAppLoader(): Promise<void> {
  const { register } = await loadPeer(() => import('tsx/esm/api'), "loading an app's TypeScript files", ['tsx']);
  register();
  // Registered last, so it runs before tsx's resolver (and before any tsconfig paths it applies).
  registerHook(new URL('./resolve-self.js', import.meta.url));
}
