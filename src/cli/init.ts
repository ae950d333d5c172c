import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { OncelyError } from '../core/errors.js';

// templates/ sits beside dist/ and src/ in the package, two levels above this file in either.
const TEMPLATE = fileURLToPath(new URL('../../templates/app/', import.meta.url));

/** npm leaves `.gitignore` out of published packages, so the template keeps it under another name. */
const RENAMED: Record<string, string> = { gitignore: '.gitignore' };

/**
 * Scaffolds a working app in `dir`: config, schema.sql, a handler, a webhook source with its consumer,
 * and a README with requests to try. Refuses, writing nothing, if any of those files exists.
 * @returns the files written, relative to the current folder
 * @example initApp('my-app'); // then: npx oncely serve my-app
 */
export function initApp(dir: string): string[] {
  const root = resolve(dir);
  const files = templateFiles(TEMPLATE).map((file) => {
    const name = RENAMED[basename(file)];
    return { from: join(TEMPLATE, file), to: join(root, name ? join(dirname(file), name) : file) };
  });
  const existing = files.filter((f) => existsSync(f.to)).map((f) => relative(process.cwd(), f.to));
  if (existing.length > 0)
    throw new OncelyError(
      'INVALID_ARGUMENT',
      `${existing.join(', ')} already exist${existing.length === 1 ? 's' : ''}; oncely init overwrites nothing (pick an empty folder)`,
    );
  // A secret of this app alone: a template's shared secret would be known to everyone who read it.
  const values: Record<string, string> = {
    __WEBHOOK_SECRET__: `whsec_${randomBytes(24).toString('base64')}`,
    __DIR__: relative(process.cwd(), root) || '.',
  };
  for (const { from, to } of files) {
    mkdirSync(dirname(to), { recursive: true });
    const text = readFileSync(from, 'utf8').replace(/__[A-Z_]+__/g, (m) => values[m] ?? m);
    writeFileSync(to, text, { flag: 'wx' });
  }
  return files.map((f) => relative(process.cwd(), f.to));
}

/** Paths of every file below `root`, relative to it. */
function templateFiles(root: string, sub = ''): string[] {
  return readdirSync(join(root, sub), { withFileTypes: true })
    .flatMap((entry) => (entry.isDirectory() ? templateFiles(root, join(sub, entry.name)) : [join(sub, entry.name)]))
    .sort();
}
