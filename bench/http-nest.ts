/**
 * The NestJS row of the HTTP bench (bench/http-apps.ts's table): the `POST /orders` controller of
 * examples/nestjs.ts on the Express platform, bare or with `@Idempotent()` and the options
 * provider, as the example configures them; and the floor: the bare route behind an interceptor
 * that only calls `next.handle()`, what Nest's interceptor plumbing costs any interceptor.
 * Decorators are applied as calls, as there.
 */
import 'reflect-metadata';
import type { AddressInfo } from 'node:net';
import { type CallHandler, Controller, HttpCode, Module, Post, Req, Res, UseInterceptors } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { NestExpressApplication } from '@nestjs/platform-express';
import type { Request, Response } from 'express';
import type { Oncely } from 'oncely';
import { IDEMPOTENCY_OPTIONS, type IdempotencyOptions, Idempotent } from 'oncely/nestjs';
import { counter, type RunningApp } from './http-apps.js';

function decorate(target: object, name: string, method: MethodDecorator[], params: ParameterDecorator[]): void {
  for (const [index, param] of params.entries()) param(target, name, index);
  const descriptor = Object.getOwnPropertyDescriptor(target, name);
  for (const d of [...method].reverse()) d(target, name, descriptor as PropertyDescriptor);
}

/** Does nothing but hand the request on: the floor any Nest interceptor starts from. */
class PassInterceptor {
  intercept(_context: unknown, next: CallHandler) {
    return next.handle();
  }
}

/** The floor: the bare route behind PassInterceptor. */
export const startNestFloor = (): Promise<RunningApp> => startNest(undefined, true);

export async function startNest(once: Oncely | undefined, floor = false): Promise<RunningApp> {
  const count = counter();
  let orders = 0;
  class OrdersController {
    create(req: Request, res: Response) {
      const { item, amount } = req.body as { item: string; amount: number };
      const orderId = `ord_${++orders}`;
      res.setHeader('Location', `/orders/${orderId}`);
      return { orderId, item, amount, n: count(`${String(req.route.path)} ${req.get('idempotency-key') ?? ''}`) };
    }
  }
  const guards = once ? [Idempotent()] : floor ? [UseInterceptors(PassInterceptor)] : [];
  decorate(
    OrdersController.prototype,
    'create',
    [Post('orders'), HttpCode(201), ...guards],
    [Req(), Res({ passthrough: true })],
  );
  Controller()(OrdersController);
  class AppModule {}
  const providers = once
    ? [
        {
          provide: IDEMPOTENCY_OPTIONS,
          useValue: { once, tenant: (req) => req.get('x-account') } as IdempotencyOptions<Request>,
        },
      ]
    : [];
  Module({ controllers: [OrdersController], providers })(AppModule);
  const app = await NestFactory.create<NestExpressApplication>(AppModule, { logger: false, abortOnError: false });
  await app.listen(0, '127.0.0.1');
  const port = (app.getHttpServer().address() as AddressInfo).port;
  return { port, close: () => app.close() };
}
