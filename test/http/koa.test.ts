import { createApp } from '../../examples/koa.js';
import { describeBodyLimits } from './bodies.js';
import { serveListener } from './express-serve.js';
import { describeHttpSuite, type HttpHarness } from './suite.js';

/** In process through light-my-request on Koa's own callback; listening on a real port. */
const harness: HttpHarness = {
  async start({ once, listen, middleware }) {
    const { app, calls } = createApp({ once, idempotency: middleware });
    return { ...(await serveListener(app.callback(), listen)), calls };
  },
};

describeHttpSuite('koa', harness);

describeBodyLimits('koa', async (once) => serveListener(createApp({ once }).app.callback(), true));
