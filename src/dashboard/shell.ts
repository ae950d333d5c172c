/**
 * The dashboard's static shell: one HTML page, its script and its style, read from
 * `src/dashboard/assets/` (shipped in the package beside dist, so both the sources and the build
 * find them at the same relative path). It holds no data: every number on the page comes from the
 * admin API, under that API's protection, so the shell itself may be public.
 */
import { readFileSync } from 'node:fs';
import type { Hono } from 'hono';

const ASSETS = new URL('../../src/dashboard/assets/', import.meta.url);
const read = (name: string) => readFileSync(new URL(name, ASSETS), 'utf8');

// Read once per process: the files never change under a running host.
let assets: { html: string; js: string; css: string } | undefined;
const loaded = () => {
  assets ??= { html: read('index.html'), js: read('app.js'), css: read('app.css') };
  return assets;
};

// Same origin only, no inline script: a value of the database shown on the page can never run as code.
const HEADERS = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-cache',
};

/** Where the pages answer (`/oncely` in `oncely serve`) and where they find the admin API (`/v1/admin`), on the same origin. */
export interface ShellOptions {
  base: string;
  api: string;
}

/** Throws unless both paths are plain paths such as /oncely. */
export function checkShellPaths({ base, api }: ShellOptions): void {
  for (const path of [base, api])
    if (!/^(\/[\w\-.]+)+$/.test(path))
      throw new TypeError(`a dashboard path must be a plain path such as /oncely, got ${path}`);
}

/** The shell's routes under `base` (whole paths: mount with `app.route('/', dashboardShell(...))`), on the loaded hono module. */
export function dashboardShell({ base, api }: ShellOptions, hono: typeof import('hono')): Hono {
  checkShellPaths({ base, api });
  const app = new hono.Hono();
  // Without the trailing slash the page's relative `app.js` would resolve one folder up.
  app.get(base, (c) => c.redirect(`${base}/`, 308));
  app.get(`${base}/`, (c) =>
    c.body(loaded().html.replace('%API%', api), 200, { ...HEADERS, 'content-type': 'text/html; charset=utf-8' }),
  );
  app.get(`${base}/app.js`, (c) =>
    c.body(loaded().js, 200, { ...HEADERS, 'content-type': 'text/javascript; charset=utf-8' }),
  );
  app.get(`${base}/app.css`, (c) =>
    c.body(loaded().css, 200, { ...HEADERS, 'content-type': 'text/css; charset=utf-8' }),
  );
  return app;
}
