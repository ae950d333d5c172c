import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

/**
 * A module resolve hook for app files: `oncely` and `oncely/...` resolve to the package this CLI
 * runs from. App code and the host then share one copy of each module, so what the app builds with
 * oncely's helpers (an `op` condition, an `OncelyError`) is what the host recognizes, whatever the
 * app's tsconfig paths say (in this repository they point at src/ for the tests).
 */
// import.meta.resolve does not exist on Node 20's hook thread; require's resolution of the
// package's own name (its exports, "default" condition) gives the same file.
const own = createRequire(import.meta.url);

export async function resolve(
  specifier: string,
  context: unknown,
  nextResolve: (specifier: string, context: unknown) => Promise<unknown>,
): Promise<unknown> {
  if (specifier === 'oncely' || specifier.startsWith('oncely/'))
    return { url: pathToFileURL(own.resolve(specifier)).href, shortCircuit: true };
  return nextResolve(specifier, context);
}
