/**
 * The README's code is user code: every top-level ```ts block becomes a file of its own that
 * imports oncely by name (through node_modules, the built package, as a user's file would), all of
 * them are compiled with tsc in strict mode, and every one that is not an app file (a config, a
 * handler, a consumer) runs on SQLite. So the README and the code cannot drift apart. Blocks
 * indented inside a list item are fragments and are left out. Names a snippet leaves to the reader
 * (`gateway`, `mailer`, `accountOf`...) are declared in READER, and stood in for by STAND_INS.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';

const exec = promisify(execFile);
const REPO = fileURLToPath(new URL('..', import.meta.url));

/** The README's top-level ts blocks, each with the section it sits in. */
function snippets(): { section: string; code: string }[] {
  const found: { section: string; code: string }[] = [];
  let section = '';
  let code: string[] | undefined;
  for (const line of readFileSync(join(REPO, 'README.md'), 'utf8').split('\n')) {
    if (code) {
      if (line === '```') {
        found.push({ section, code: `${code.join('\n')}\n` });
        code = undefined;
      } else code.push(line);
    } else if (line.startsWith('## ')) section = line.slice(3);
    else if (line === '```ts') code = [];
  }
  return found;
}

const READER = `declare const input: { orderId: string; amount: number; event_id: string; video_file_id: string };
declare const gateway: { charge(input: unknown, options: { idempotencyKey: string }): Promise<{ chargeId: string }> };
declare const once: import('oncely').Oncely;
declare function accountOf(authorization: string | undefined): string | undefined;
declare function cutClip(input: unknown): Promise<{ clipId: string }>;
declare function pushResult(clip: { clipId: string }, options: { idempotencyKey: string }): Promise<{ pushedId: string }>;
declare function unpush(pushed: { pushedId: string }, idempotencyKey: string): Promise<void>;
declare function makeThumb(): Promise<string>;
declare function indexClip(): Promise<string>;
declare const target: string;
declare const mailer: { send(input: unknown, options: { idempotencyKey: string }): Promise<{ messageId: string }> };
declare const argsFromTheModel: unknown;
`;

const STAND_INS = `import { createOncely } from 'oncely';
import { sqliteStore } from 'oncely/sqlite';
Object.assign(globalThis, {
  input: { orderId: 'ORD-10086', amount: 4200, event_id: 'E-1', video_file_id: 'V-1' },
  gateway: { charge: async () => ({ chargeId: 'ch_1' }) },
  once: await createOncely({ store: sqliteStore({ path: './.oncely/oncely.db' }), tenant: 'acme' }),
  accountOf: () => 'acme',
  cutClip: async () => ({ clipId: 'clip-1' }),
  pushResult: async () => ({ pushedId: 'push-1' }),
  unpush: async () => undefined,
  makeThumb: async () => 'thumb-1',
  indexClip: async () => 'index-1',
  target: './.oncely/flows.db',
  mailer: { send: async () => ({ messageId: 'm-1' }) },
  argsFromTheModel: { taskId: 'T-1', recipientId: 'u-42', templateId: 'review', entityVersion: 3, body: 'Please review.' },
});
`;

const blocks = snippets();
// Inside the repository, so `oncely` resolves through node_modules as it does in a user's project.
// .oncely/ is ignored by git, so a fresh clone has none yet.
mkdirSync(join(REPO, '.oncely'), { recursive: true });
const dir = mkdtempSync(join(REPO, '.oncely', 'readme-'));
// A block whose first line names its file (`// charge.ts: ...`) is written under that name, so
// another block can import it as the README shows; the others are numbered.
const file = (i: number) =>
  /^\/\/ ([\w-]+\.ts):/.exec(blocks[i]?.code ?? '')?.[1] ?? `snippet-${String(i + 1).padStart(2, '0')}.ts`;

beforeAll(() => {
  mkdirSync(join(dir, '.oncely'), { recursive: true });
  writeFileSync(join(dir, 'package.json'), '{ "type": "module" }\n');
  writeFileSync(join(dir, 'reader.d.ts'), READER);
  writeFileSync(join(dir, 'stand-ins.ts'), STAND_INS);
  blocks.forEach((b, i) => {
    writeFileSync(join(dir, file(i)), `// README.md, section "${b.section}"\n${b.code}`);
  });
  // Legacy decorators, as NestJS apps compile them (the NestJS section's controller).
  const compilerOptions = {
    module: 'node16',
    target: 'es2022',
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    experimentalDecorators: true,
  };
  writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify({ compilerOptions, include: ['*.ts'] }));
});

describe('README snippets', () => {
  it('has the snippets this test expects to find', () => {
    expect(blocks.map((b) => b.section)).toEqual(
      expect.arrayContaining([
        'How it works',
        'Stores',
        'Flows: durable workflows whose steps pass stable keys downstream',
      ]),
    );
  });

  it('compile as user files importing oncely by name', async () => {
    const tsc = join(REPO, 'node_modules', '.bin', 'tsc');
    const result = await exec(tsc, ['-p', 'tsconfig.json'], { cwd: dir }).then(
      () => '',
      (e: { stdout: string }) => e.stdout,
    );
    expect(result).toBe('');
  }, 120_000);

  blocks.forEach((b, i) => {
    // App files (a config, a handler, a consumer) are loaded by `oncely serve`, not run; test files by their runner.
    if (/export (default|(async )?function handle)/.test(b.code) || /from 'vitest'/.test(b.code)) return;
    it(`runs ${file(i)} (${b.section})`, async () => {
      await exec(process.execPath, ['--import', 'tsx', '--import', './stand-ins.ts', file(i)], {
        cwd: dir,
        timeout: 30_000,
      });
    }, 60_000);
  });
});
