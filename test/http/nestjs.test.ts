import 'reflect-metadata';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  ConsoleLogger,
  Controller,
  Header,
  HttpCode,
  type INestApplication,
  Module,
  Post,
  Res,
  StreamableFile,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { Response } from 'express';
import { tap } from 'rxjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../../examples/nestjs.js';
import { createOncely, type Oncely } from '../../src/index.js';
import { IDEMPOTENCY_OPTIONS, Idempotent } from '../../src/nestjs/index.js';
import { sqliteStore } from '../../src/sqlite/index.js';
import { type Served, serve } from './express-serve.js';
import { describeHttpSuite, fresh, type HttpHarness } from './suite.js';

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

/** Nest's log lines of level warn and above, which a replay must not produce. */
class CapturingLogger extends ConsoleLogger {
  readonly lines: string[] = [];
  override error(message: unknown): void {
    this.lines.push(`error: ${String(message)}`);
  }
  override warn(message: unknown): void {
    this.lines.push(`warn: ${String(message)}`);
  }
  override fatal(message: unknown): void {
    this.lines.push(`fatal: ${String(message)}`);
  }
  override log(): void {}
}

/**
 * A route whose own status and headers differ from what it answers: @HttpCode(201) and
 * @Header('x-a', '1'), while it answers 422 with x-a: 2 and a text/csv body (no charset), through
 * an outer interceptor that adds a header of its own. A replay and a problem take the stored or
 * problem status and headers over the route's, byte for byte.
 */
describe('nestjs answers of the gate on a route with @HttpCode() and @Header()', () => {
  const csv = 'id,state\n7,refused\n';
  let once: Oncely;
  let logger: CapturingLogger;
  let app: INestApplication;
  let running: Served;
  let runs = 0;

  beforeAll(async () => {
    once = await createOncely({
      store: sqliteStore({ path: join(mkdtempSync(join(tmpdir(), 'oncely-nest-')), 'http.db') }),
      tenant: 'default',
    });
    class RefusalsController {
      refuse(res: Response) {
        runs++;
        res.status(422).setHeader('x-a', '2');
        return new StreamableFile(Buffer.from(csv), { type: 'text/csv' });
      }
      clear() {
        runs++;
      }
    }
    const proto = RefusalsController.prototype;
    Res({ passthrough: true })(proto, 'refuse', 0);
    const descriptor = Object.getOwnPropertyDescriptor(proto, 'refuse') as PropertyDescriptor;
    for (const decorator of [
      Idempotent({ replayHeaders: ['content-type', 'x-a'] }),
      Header('x-a', '1'),
      HttpCode(201),
      Post('refusals'),
    ])
      decorator(proto, 'refuse', descriptor);
    const clear = Object.getOwnPropertyDescriptor(proto, 'clear') as PropertyDescriptor;
    for (const decorator of [Idempotent(), HttpCode(204), Post('clears')]) decorator(proto, 'clear', clear);
    Controller()(RefusalsController);
    class AppModule {}
    Module({ controllers: [RefusalsController], providers: [{ provide: IDEMPOTENCY_OPTIONS, useValue: { once } }] })(
      AppModule,
    );
    logger = new CapturingLogger();
    app = await NestFactory.create(AppModule, { logger, abortOnError: false });
    app.useGlobalInterceptors({
      intercept: (context, next) =>
        next.handle().pipe(tap(() => context.switchToHttp().getResponse<Response>().setHeader('x-outer', '1'))),
    });
    await app.init();
    running = await serve(app.getHttpAdapter().getInstance(), true);
  });
  afterAll(async () => {
    await running.close();
    await app.close();
    await once.close();
  });

  const post = (key: string) =>
    running.request({
      method: 'POST',
      path: '/refusals',
      headers: { 'idempotency-key': key, 'content-type': 'application/json' },
      body: {},
    });

  it('replays the stored 422 with its headers and exact bytes, in one piece and with nothing logged', async () => {
    const key = `"${fresh('refused')}"`;
    const first = await post(key);
    const replay = await post(key);
    expect(runs).toBe(1);
    expect(first.status).toBe(422);
    expect(replay).toMatchObject({ status: 422, body: csv });
    expect(replay.headers).toMatchObject({
      'content-type': 'text/csv',
      'x-a': '2',
      'x-outer': '1',
      'idempotent-replayed': 'true',
      'content-length': String(Buffer.byteLength(csv)),
    });
    expect(replay.headers['transfer-encoding']).toBeUndefined();
    expect(logger.lines).toEqual([]);
  });

  it('replays a 204 without a body, and with nothing logged', async () => {
    const key = `"${fresh('cleared')}"`;
    const before = runs;
    const clear = () =>
      running.request({ method: 'POST', path: '/clears', headers: { 'idempotency-key': key }, body: {} });
    const first = await clear();
    const replay = await clear();
    expect(runs - before).toBe(1);
    expect(first).toMatchObject({ status: 204, body: '' });
    expect(replay).toMatchObject({ status: 204, body: '' });
    expect(replay.headers).toMatchObject({ 'idempotent-replayed': 'true', 'x-outer': '1' });
    expect(logger.lines).toEqual([]);
  });

  it('answers a malformed key with the 400 problem, not the route status or content type', async () => {
    const bad = await post('has space');
    expect(bad.status).toBe(400);
    expect(bad.headers['content-type']).toBe('application/problem+json');
    expect(bad.headers['content-length']).toBe(String(Buffer.byteLength(bad.body)));
    expect(JSON.parse(bad.body)).toMatchObject({ status: 400, code: 'KEY_INVALID' });
    expect(logger.lines).toEqual([]);
  });
});
