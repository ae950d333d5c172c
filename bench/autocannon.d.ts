// autocannon 8 ships no types and @types/autocannon is not a dependency: the part bench/http-load.ts uses.
declare module 'autocannon' {
  namespace autocannon {
    interface Request {
      method?: string;
      path?: string;
      headers?: Record<string, string>;
      body?: string | Buffer;
    }
    interface RequestSpec extends Request {
      /** Called per request before it is built; return the request to send. */
      setupRequest?: (request: Request, context: Record<string, unknown>) => Request;
      /** Called per response, with the raw header names as the server sent them. */
      onResponse?: (
        status: number,
        body: string,
        context: Record<string, unknown>,
        headers: Record<string, string | string[]>,
      ) => void;
    }
    interface Options extends Request {
      url: string;
      connections?: number;
      pipelining?: number;
      duration?: number;
      /** Requests per second over all connections (open loop). */
      overallRate?: number;
      amount?: number;
      timeout?: number;
      requests?: RequestSpec[];
    }
    interface Histogram {
      average: number;
      mean: number;
      min: number;
      max: number;
      p50: number;
      p99: number;
    }
    interface Result {
      requests: Histogram & { total: number; sent: number };
      latency: Histogram;
      duration: number;
      errors: number;
      timeouts: number;
      mismatches: number;
      non2xx: number;
      resets: number;
      statusCodeStats: Record<string, { count: number }>;
      start: Date;
      finish: Date;
    }
  }
  function autocannon(options: autocannon.Options): Promise<autocannon.Result>;
  export = autocannon;
}
