/**
 * The package runs from dist/ alone: no built module names a path under src/ (which the package
 * leaves out), and every file a built module reads by its own URL (`new URL('…', import.meta.url)`)
 * exists and is in what the package ships. Reads the build: `npm run build` first, as `npm test` does.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import ts from 'typescript';
import { beforeAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const DIST = join(ROOT, 'dist');
const { files: SHIPPED } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { files: string[] };

function builtModules(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return builtModules(path);
    return entry.name.endsWith('.js') ? [path] : [];
  });
}

/** The string literals of a module's code (comments left out), and the first argument of each `new URL(…, import.meta.url)`. */
function literalsOf(file: string): { strings: string[]; urls: ts.Expression[] } {
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest);
  const strings: string[] = [];
  const urls: ts.Expression[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isStringLiteralLike(node) || ts.isTemplateLiteralToken(node)) strings.push(node.text);
    if (
      ts.isNewExpression(node) &&
      node.expression.getText(source) === 'URL' &&
      node.arguments?.[1]?.getText(source) === 'import.meta.url' &&
      node.arguments[0]
    )
      urls.push(node.arguments[0]);
    ts.forEachChild(node, visit);
  };
  visit(source);
  return { strings, urls };
}

const modules = builtModules(DIST);
let parsed: { file: string; strings: string[]; urls: ts.Expression[] }[];
beforeAll(() => {
  parsed = modules.map((file) => ({ file, ...literalsOf(file) }));
});

describe('dist/ as the package ships it', () => {
  it('holds the build, the dashboard page with it', () => {
    const names = modules.map((file) => relative(DIST, file));
    expect(names).toContain('cli/main.js');
    expect(names).toContain('dashboard/assets/app.js');
    for (const asset of ['index.html', 'app.css']) expect(existsSync(join(DIST, 'dashboard/assets', asset))).toBe(true);
  });

  it('names no path under src/ in any module', () => {
    const named = parsed.flatMap(({ file, strings }) =>
      strings.filter((text) => /(^|\/)src\//.test(text)).map((text) => `${relative(ROOT, file)}: ${text}`),
    );
    expect(named).toEqual([]);
  });

  it('reads by its own URL only files that exist and ship', () => {
    const reads = parsed.flatMap(({ file, urls }) =>
      urls
        .filter(ts.isStringLiteralLike)
        .map((literal) => relative(ROOT, fileURLToPath(new URL(literal.text, pathToFileURL(file))))),
    );
    // The CLI's templates and version, the app loader's hook, the dashboard's page: a new read shows here.
    expect(reads.length).toBeGreaterThanOrEqual(4);
    const wrong = reads.filter(
      (path) =>
        !existsSync(join(ROOT, path)) ||
        // '' is the package's own folder (the CLI finds the project that installed it from there).
        !(
          path === '' ||
          path === 'package.json' ||
          SHIPPED.some((entry) => path === entry || path.startsWith(`${entry}/`))
        ),
    );
    expect(wrong).toEqual([]);
  });
});
