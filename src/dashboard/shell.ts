/**
 * The dashboard's static shell: one HTML page, its style and its script modules. Their sources are
 * in `src/dashboard/assets/`; the build compiles the page's TypeScript to ES modules in
 * `dist/dashboard/assets/` and copies index.html and app.css beside them. The shell holds no data:
 * every number on the page comes from the admin API, under that API's protection, so the shell
 * itself may be public.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { extname } from 'node:path';
import type { Hono } from 'hono';

// Always the build's folder: from dist/dashboard/shell.js this is its own assets/ beside it; from
// the sources (vitest, tsx) it is the last build's. One path, and the page served is always the
// compiled one a user gets: a browser cannot run the .ts sources.
const ASSETS = new URL('../../dist/dashboard/assets/', import.meta.url);
const read = (name: string) => readFileSync(new URL(name, ASSETS), 'utf8');
const TYPES: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
};

// Read once per process, at the first request: the files never change under a running host.
let assets: { html: string; files: Map<string, { body: string; type: string }> } | undefined;
const loaded = () => {
  assets ??= {
    html: read('index.html'),
    files: new Map(
      readdirSync(ASSETS).flatMap((name) => {
        const type = TYPES[extname(name)];
        return type ? [[name, { body: read(name), type }] as const] : [];
      }),
    ),
  };
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
  // The style and the page's modules (app.js imports its siblings); any other name is not the shell's.
  app.get(`${base}/:name`, (c, next) => {
    const file = loaded().files.get(c.req.param('name'));
    return file ? c.body(file.body, 200, { ...HEADERS, 'content-type': file.type }) : next();
  });
  return app;
}
