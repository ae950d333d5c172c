import { register as registerHook } from 'node:module';

/** Lets the CLI import an app's `.ts` files (through tsx), with their `oncely` imports bound to this CLI's copy. */
export async function registerAppLoader(): Promise<void> {
  const { register } = await import('tsx/esm/api');
  register();
  // Registered last, so it runs before tsx's resolver (and before any tsconfig paths it applies).
  registerHook(new URL('./resolve-self.js', import.meta.url));
}
