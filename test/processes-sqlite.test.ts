import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describeProcesses } from './processes.js';

describeProcesses('sqlite', () => ({
  kind: 'sqlite',
  path: join(mkdtempSync(join(tmpdir(), 'oncely-proc-')), 'shared.db'),
}));
