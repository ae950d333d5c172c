import { createApp } from '../../examples/nestjs.js';
import { serve } from './express-serve.js';
import { describeHttpSuite, type HttpHarness } from './suite.js';

/** Nest on its Express platform: in process through light-my-request on the Express instance, or listening. */
const harness: HttpHarness = {
  async start({ once, listen, middleware }) {
    const { app, calls } = await createApp({ once, idempotency: middleware });
    await app.init();
    const running = await serve(app.getHttpAdapter().getInstance(), listen);
    return {
      calls,
      request: running.request,
      close: async () => {
        await running.close();
        await app.close();
      },
    };
  },
};

describeHttpSuite('nestjs', harness);
