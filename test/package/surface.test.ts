/**
 * The public surface, recorded: every entry point of package.json `exports`, its exported names
 * and their kinds, read from the built declarations (`npm run build` first) with the TypeScript
 * compiler, against the snapshot in api/surface.md. A change to the surface is a change to that
 * file, so a review sees it. After a change that is meant:
 *   ONCELY_UPDATE_SURFACE=1 npx vitest run test/package/surface.test.ts
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { expect, it } from 'vitest';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
const SNAPSHOT = join(REPO, 'api', 'surface.md');
const UPDATE = 'ONCELY_UPDATE_SURFACE=1 npx vitest run test/package/surface.test.ts';

/** Entry point (`oncely`, `oncely/sqlite`...) to its names and their kinds. */
type Surface = Map<string, Map<string, string>>;

/** The kinds a symbol can be, in the order a name that is several (a class and a namespace) lists them. */
const KINDS: [ts.SymbolFlags, string][] = [
  [ts.SymbolFlags.Class, 'class'],
  [ts.SymbolFlags.Function, 'function'],
  [ts.SymbolFlags.Enum, 'enum'],
  [ts.SymbolFlags.Variable, 'const'],
  [ts.SymbolFlags.Interface, 'interface'],
  [ts.SymbolFlags.TypeAlias, 'type'],
  [ts.SymbolFlags.Module, 'namespace'],
];

/** The exports of every entry point, from the .d.ts files package.json names, in one program. */
function builtSurface(): Surface {
  const { exports } = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as {
    exports: Record<string, { types: string }>;
  };
  const entries = Object.entries(exports).map(([subpath, { types }]) => ({
    name: subpath === '.' ? 'oncely' : `oncely/${subpath.slice(2)}`,
    file: join(REPO, types),
  }));
  const missing = entries.filter((entry) => !existsSync(entry.file)).map((entry) => entry.file);
  if (missing.length > 0) throw new Error(`no declarations at ${missing.join(', ')}: run \`npm run build\` first`);
  const program = ts.createProgram(
    entries.map((entry) => entry.file),
    {
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      skipLibCheck: true,
      noEmit: true,
      types: ['node'],
    },
  );
  const checker = program.getTypeChecker();
  const surface: Surface = new Map();
  for (const entry of entries) {
    const source = program.getSourceFile(entry.file);
    const module = source && checker.getSymbolAtLocation(source);
    if (!module) throw new Error(`${entry.file} is not a module`);
    const names = new Map<string, string>();
    for (const exported of checker.getExportsOfModule(module)) names.set(exported.name, kindOf(checker, exported));
    surface.set(entry.name, names);
  }
  return surface;
}

/** `class`, `function`, `interface`...; `(type only)` when exported with `export type`, so no value. */
function kindOf(checker: ts.TypeChecker, exported: ts.Symbol): string {
  const target = exported.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(exported) : exported;
  const kinds = KINDS.filter(([flag]) => target.flags & flag).map(([, kind]) => kind);
  const typeOnly = exported.declarations?.some(
    (d) => ts.isExportSpecifier(d) && (d.isTypeOnly || d.parent.parent.isTypeOnly),
  );
  const kind = kinds.length > 0 ? kinds.join(' + ') : 'unresolved';
  return typeOnly && kinds.some((k) => k === 'class' || k === 'function' || k === 'const' || k === 'enum')
    ? `${kind} (type only)`
    : kind;
}

const byName = (a: string, b: string) => a.toLowerCase().localeCompare(b.toLowerCase(), 'en') || (a < b ? -1 : 1);

/** The snapshot's text: one section per entry point, one line per name, both sorted. */
function render(surface: Surface): string {
  const lines = [
    "# oncely's public surface",
    '',
    'Every entry point of package.json `exports`, its exported names and their kinds, read from the',
    'built declarations by test/package/surface.test.ts. A change here is a change to what users',
    `import: after one that is meant, \`npm run build && ${UPDATE}\`.`,
  ];
  for (const entry of [...surface.keys()].sort(byName)) {
    lines.push('', `## ${entry}`, '');
    const names = surface.get(entry) ?? new Map<string, string>();
    for (const name of [...names.keys()].sort(byName)) lines.push(`- \`${name}\`: ${names.get(name)}`);
  }
  return `${lines.join('\n')}\n`;
}

/** The snapshot read back into entries and names, to say what changed. */
function parse(text: string): Surface {
  const surface: Surface = new Map();
  let names: Map<string, string> | undefined;
  for (const line of text.split('\n')) {
    const section = /^## (.+)$/.exec(line);
    if (section?.[1]) {
      names = new Map();
      surface.set(section[1], names);
    }
    const name = /^- `(.+)`: (.+)$/.exec(line);
    if (name?.[1] && name[2] && names) names.set(name[1], name[2]);
  }
  return surface;
}

/** One line per entry point that changed: names added, removed, or of another kind. */
function changes(recorded: Surface, built: Surface): string[] {
  const lines: string[] = [];
  for (const entry of new Set([...recorded.keys(), ...built.keys()])) {
    const before = recorded.get(entry);
    const after = built.get(entry);
    if (!before) lines.push(`${entry}: a new entry point (${after?.size} names)`);
    else if (!after) lines.push(`${entry}: entry point removed`);
    else {
      const added = [...after.keys()].filter((n) => !before.has(n)).map((n) => `${n} (${after.get(n)})`);
      const removed = [...before.keys()].filter((n) => !after.has(n)).map((n) => `${n} (${before.get(n)})`);
      const changed = [...after.keys()]
        .filter((n) => before.has(n) && before.get(n) !== after.get(n))
        .map((n) => `${n}: ${before.get(n)} -> ${after.get(n)}`);
      const parts = [
        added.length > 0 ? `added ${added.join(', ')}` : '',
        removed.length > 0 ? `removed ${removed.join(', ')}` : '',
        changed.length > 0 ? `changed ${changed.join(', ')}` : '',
      ].filter(Boolean);
      if (parts.length > 0) lines.push(`${entry}: ${parts.join('; ')}`);
    }
  }
  return lines;
}

it('every entry point exports the names and kinds api/surface.md records', () => {
  const built = builtSurface();
  const text = render(built);
  if (process.env.ONCELY_UPDATE_SURFACE === '1') writeFileSync(SNAPSHOT, text);
  const recorded = existsSync(SNAPSHOT) ? readFileSync(SNAPSHOT, 'utf8') : '';
  if (recorded === text) return;
  const found = changes(parse(recorded), built);
  expect.fail(
    [
      'The public surface is not the one api/surface.md records:',
      ...(found.length > 0 ? found : ['(the same names and kinds; only the file differs)']).map((l) => `  ${l}`),
      `If the change is meant, record it (and review the diff): ${UPDATE}`,
    ].join('\n'),
  );
});
