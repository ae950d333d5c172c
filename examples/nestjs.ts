/**
 * An orders API on NestJS (Express platform) with oncely's `@Idempotent()` interceptor on each
 * route. Decorators are applied as calls here, so the example compiles without
 * experimentalDecorators; in an app they are written `@Post('charge') @Idempotent()` as usual.
 * Run it with `node --import tsx examples/nestjs.ts`, then
 * `curl -X POST localhost:3006/orders -H 'Idempotency-Key: "order-1"' -H 'content-type: application/json' -d '{"item":"tea","amount":3}'`
 * twice: the second answer is the first, replayed.
 */
import 'reflect-metadata';
import { pathToFileURL } from 'node:url';
import { Controller, Get, HttpCode, Module, Patch, Post, Req, Res } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { NestExpressApplication } from '@nestjs/platform-express';
import type { Request, Response } from 'express';
import { createOncely, type Oncely } from 'oncely';
import { IDEMPOTENCY_OPTIONS, type IdempotencyOptions, Idempotent } from 'oncely/nestjs';
import { sqliteStore } from 'oncely/sqlite';

/** `bytes` bytes of text, for byte-for-byte replays of large responses. */
const blob = (bytes: number) =>
  Buffer.alloc(bytes, 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_+');

/** Applies decorators to a method as `@a @b method(@p req)` would: method decorators, then parameters by index. */
function decorate(target: object, name: string, method: MethodDecorator[], params: ParameterDecorator[] = []): void {
  for (const [index, param] of params.entries()) param(target, name, index);
  const descriptor = Object.getOwnPropertyDescriptor(target, name);
  for (const d of [...method].reverse()) d(target, name, descriptor as PropertyDescriptor);
}

/** Builds the example app on an engine; `calls` counts handler executions by route pattern and key. */
export async function createApp({
  once,
  idempotency: extra = {},
}: {
  once: Oncely;
  idempotency?: Partial<IdempotencyOptions<Request>>;
}) {
  const calls = new Map<string, number>();
  const count = (req: Request) => {
    const name = `${String(req.route.path)} ${req.get('idempotency-key') ?? ''}`;
    const n = (calls.get(name) ?? 0) + 1;
    calls.set(name, n);
    return n;
  };
  let orders = 0;

  class OrdersController {
    create(req: Request, res: Response) {
      const { item, amount } = req.body as { item: string; amount: number };
      const orderId = `ord_${++orders}`;
      res.setHeader('Location', `/orders/${orderId}`);
      return { orderId, item, amount, n: count(req) };
    }
    charge(req: Request) {
      return { orderId: req.params.id, charged: true, n: count(req) };
    }
    declined(req: Request) {
      return { error: 'card_declined', n: count(req) };
    }
    flaky(req: Request) {
      return { error: 'upstream', n: count(req) };
    }
    throws(req: Request): never {
      count(req);
      throw new Error('handler failed');
    }
    async slow(req: Request) {
      const n = count(req);
      await new Promise((r) => setTimeout(r, 300));
      return { done: true, n };
    }
    async stream(req: Request, res: Response) {
      count(req);
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      for (let i = 0; i < 3; i++) {
        res.write(`data: ${i}\n\n`);
        await new Promise((r) => setTimeout(r, 10));
      }
      res.end();
    }
    blob(req: Request, res: Response) {
      count(req);
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      res.end(blob((req.body as { bytes: number }).bytes));
    }
    big(req: Request) {
      return { n: count(req), blob: 'x'.repeat(2 * 1024 * 1024) };
    }
    read(req: Request) {
      return { orderId: req.params.id };
    }
    patch(req: Request) {
      return { orderId: req.params.id, patched: true, n: count(req) };
    }
  }
  const proto = OrdersController.prototype;
  const passthrough = Res({ passthrough: true });
  decorate(proto, 'create', [Post('orders'), Idempotent()], [Req(), passthrough]);
  decorate(proto, 'charge', [Post('orders/:id/charge'), HttpCode(200), Idempotent()], [Req()]);
  decorate(proto, 'declined', [Post('payments/declined'), HttpCode(402), Idempotent()], [Req()]);
  decorate(proto, 'flaky', [Post('flaky'), HttpCode(503), Idempotent()], [Req()]);
  decorate(proto, 'throws', [Post('throws'), Idempotent()], [Req()]);
  decorate(proto, 'slow', [Post('slow'), HttpCode(200), Idempotent()], [Req()]);
  decorate(proto, 'stream', [Post('stream'), Idempotent()], [Req(), Res()]);
  decorate(proto, 'blob', [Post('blob'), Idempotent()], [Req(), Res()]);
  decorate(proto, 'big', [Post('big'), HttpCode(200), Idempotent({ ttl: '1h' })], [Req()]);
  decorate(proto, 'read', [Get('orders/:id'), Idempotent()], [Req()]);
  decorate(proto, 'patch', [Patch('orders/:id'), Idempotent()], [Req()]);
  Controller()(OrdersController);

  class AppModule {}
  const options: IdempotencyOptions<Request> = { once, tenant: (req) => req.get('x-account'), ...extra };
  Module({ controllers: [OrdersController], providers: [{ provide: IDEMPOTENCY_OPTIONS, useValue: options }] })(
    AppModule,
  );
  const app = await NestFactory.create<NestExpressApplication>(AppModule, { logger: false, abortOnError: false });
  return { app, calls };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const once = await createOncely({ store: sqliteStore({ path: './.oncely/example-nestjs.db' }) });
  const { app } = await createApp({ once });
  const port = Number(process.env.PORT ?? 3006);
  await app.listen(port);
  console.log(`nestjs example on http://localhost:${port}`);
}
