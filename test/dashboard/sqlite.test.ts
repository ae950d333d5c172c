/** The dashboard in Chromium against `oncely serve` on SQLite (suite.ts). */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { dashboardSuite } from './suite.js';

dashboardSuite(
  'sqlite',
  () => join(mkdtempSync(join(tmpdir(), 'oncely-dash-')), 'app.db'),
  async () => {},
);
