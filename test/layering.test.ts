import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const SRC = resolve(dirname(fileURLToPath(import.meta.url)), '..', 'src');

/**
 * The layers of src/, lowest first (DESIGN.md "Layers"). A file may import its own layer or a
 * lower one, never a higher one. Entries name a top folder, or a file path where one file sits
 * below its folder: `store.ts` is the RecordStore contract every store and the engine share, and a
 * store's `driver.ts` declares the few driver methods oncely uses, which the db seam's dialect
 * drives too, so it sits at the bottom with no imports of its own. Files of one layer may import
 * each other (the host uses http and flows) as long as no cycle forms.
 */
const LAYERS: readonly (readonly string[])[] = [
  ['core', 'store.ts', 'sqlite/driver.ts', 'postgres/driver.ts', 'redis/driver.ts'],
  ['db'],
  ['sqlite', 'postgres', 'redis', 'mysql', 'work'],
  ['engine'],
  [
    'http',
    'express',
    'fastify',
    'hono',
    'host',
    'flows',
    'agent',
    'prometheus',
    'brokers',
    'ops',
    'dashboard',
    'fetch',
    'nestjs',
    'koa',
    'client',
    'testing',
  ],
  ['cli', 'index.ts'],
];

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith('.ts') ? [relative(SRC, path)] : [];
  });
}

// Static `import ... from`, `export ... from` and side-effect imports, relative ones only.
const IMPORT = /^\s*(?:import|export)\s+(?:[^'";]*?\s+from\s+)?['"](\.{1,2}\/[^'"]+)['"]/gm;

/** The src/-relative files `file` imports (`.js` specifiers resolved to their `.ts` sources). */
function importsOf(file: string): string[] {
  const text = readFileSync(join(SRC, file), 'utf8');
  return [...text.matchAll(IMPORT)].map((match) =>
    relative(SRC, resolve(SRC, dirname(file), (match[1] as string).replace(/\.js$/, '.ts'))),
  );
}

/** The index in LAYERS of a file: its own path if listed, else its top folder (or its name at the top). */
function layerOf(file: string): number {
  const byPath = LAYERS.findIndex((layer) => layer.includes(file));
  if (byPath >= 0) return byPath;
  const top = file.split('/')[0] as string;
  const byFolder = LAYERS.findIndex((layer) => layer.includes(top));
  if (byFolder < 0) throw new Error(`${file} is in no layer: add its folder to LAYERS`);
  return byFolder;
}

/**
 * The engine works on any RecordStore: it sees the contract (store.ts) and core, never a store, the
 * db seam or a surface, so a store is chosen by whoever builds the engine (the host, a user).
 */
const ENGINE_SEES = ['core', 'store.ts', 'engine'];

const files = sourceFiles(SRC).sort();
const graph = new Map(files.map((file) => [file, importsOf(file)]));

describe('layering of src/', () => {
  it('finds the imports it checks', () => {
    expect(graph.get('host/open.ts')).toContain('host/host.ts');
    expect(graph.get('index.ts')).toContain('engine/engine.ts');
  });

  it('every file is in a layer and imports only files that exist', () => {
    const missing = [...graph].flatMap(([file, imports]) =>
      imports.filter((target) => !graph.has(target)).map((target) => `${file} -> ${target}`),
    );
    expect(missing).toEqual([]);
    for (const file of files) layerOf(file);
  });

  it('no import points up the layer order', () => {
    const upward = [...graph].flatMap(([file, imports]) =>
      imports
        .filter((target) => graph.has(target) && layerOf(target) > layerOf(file))
        .map((target) => `${file} (${LAYERS[layerOf(file)]?.join(' ')}) -> ${target}`),
    );
    expect(upward).toEqual([]);
  });

  it('the engine imports no store and no db', () => {
    const seen = (target: string) =>
      ENGINE_SEES.includes(target) || ENGINE_SEES.includes(target.split('/')[0] as string);
    const wrong = [...graph]
      .filter(([file]) => file.startsWith('engine/'))
      .flatMap(([file, imports]) => imports.filter((target) => !seen(target)).map((target) => `${file} -> ${target}`));
    expect(wrong).toEqual([]);
  });

  it('has no import cycle', () => {
    const cycles: string[] = [];
    const state = new Map<string, 'open' | 'done'>();
    const path: string[] = [];
    const visit = (file: string): void => {
      state.set(file, 'open');
      path.push(file);
      for (const target of graph.get(file) ?? []) {
        if (!graph.has(target)) continue;
        if (state.get(target) === 'open') cycles.push([...path.slice(path.indexOf(target)), target].join(' -> '));
        else if (!state.has(target)) visit(target);
      }
      path.pop();
      state.set(file, 'done');
    };
    for (const file of files) if (!state.has(file)) visit(file);
    expect(cycles).toEqual([]);
  });
});
