import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

const src = fileURLToPath(new URL('./src/', import.meta.url));

export default defineConfig({
  // The same mapping as tsconfig.json's paths: examples import `oncely/...` as user code does, and
  // in the repository that resolves to the sources the tests import, so each class loads once.
  resolve: {
    alias: [
      { find: /^oncely$/, replacement: `${src}index.ts` },
      { find: /^oncely\/agent\/(.+)$/, replacement: `${src}agent/$1.ts` },
      { find: /^oncely\/(.+)$/, replacement: `${src}$1/index.ts` },
    ],
  },
  test: {
    include: ['test/**/*.test.ts', 'examples/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // Most files wait on services and child processes, not on this process's CPU: three at a time
    // on the 2-core CI machine (vitest's default is one there) keeps both cores busy.
    maxWorkers: 3,
    minWorkers: 1,
  },
});
