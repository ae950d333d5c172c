/**
 * oncely/prometheus owns the metrics cells an engine's options take (`new Metrics()`) and the
 * rates, so importing it must not load prom-client: only registerMetrics() on prom-client's global
 * registry needs it. Checked in a process of its own, whose module cache nothing else has filled.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { expect, it } from 'vitest';

const ENTRY = fileURLToPath(new URL('../../src/prometheus/index.ts', import.meta.url));

const SCRIPT = `
import { createRequire } from 'node:module';
const loaded = () => Object.keys(createRequire(import.meta.url).cache).some((k) => k.includes('/prom-client/'));
const { Metrics, rates, rateTotals, registerMetrics } = await import(${JSON.stringify(ENTRY)});
const atImport = loaded();
const metrics = new Metrics();
metrics.add('oncely_calls_total', ['engine', 'pay', 'replayed']);
rates(rateTotals(metrics));
const afterRates = loaded();
registerMetrics(undefined, metrics);
console.log(JSON.stringify({ atImport, afterRates, afterRegister: loaded() }));
`;

it('importing oncely/prometheus and counting loads no prom-client; registerMetrics() on the global registry does', async () => {
  const { stdout } = await promisify(execFile)(process.execPath, [
    '--import',
    'tsx',
    '--input-type=module',
    '-e',
    SCRIPT,
  ]);
  expect(JSON.parse(stdout)).toEqual({ atImport: false, afterRates: false, afterRegister: true });
});
