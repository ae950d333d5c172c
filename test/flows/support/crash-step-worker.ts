/**
 * A flow worker that dies (SIGKILL, from oncely/testing's crash hooks) right after the `charge`
 * step's effect, before its completion is stored: the window where a step must run again.
 */
import { openDb } from '../../../src/db/index.js';
import { createFlows } from '../../../src/flows/index.js';
import { crashHooks } from '../../../src/testing/crash-hooks.js';
import { chargeFlow } from './charge-flow.js';

const job = JSON.parse(process.argv[2] ?? '{}') as { target: string; tag: string; lease: number };
const db = await openDb(job.target, { poolSize: 2 });
const flow = chargeFlow(job.tag, db, 'crashed');
const hooks = crashHooks({ ONCELY_CRASH_AT: 'after-effect', ONCELY_CRASH_ACTION: `${flow.name}/charge` });
const flows = await createFlows({ db, flows: [flow], lease: job.lease, poll: '20ms', metrics: false, hooks });
await flows.startWorker();
console.log('ready');
