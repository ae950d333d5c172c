import { fileURLToPath } from 'node:url';

/** The built CLI (`npm test` builds first; `npm run build` before one file): the command a user runs, without a loader's start-up in every call. */
export const CLI_MAIN = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));
