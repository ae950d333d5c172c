import { randomUUID } from 'node:crypto';
import { createServer, type Socket, connect as tcp } from 'node:net';
import { type JetStreamManager, jetstream, jetstreamManager, type PubAck } from '@nats-io/jetstream';
import { connect, headers, type NatsConnection } from '@nats-io/transport-node';

/** The NATS with JetStream the tests use (scripts/services.sh starts it). */
export const NATS = '127.0.0.1:4222';

/** A stream of this test's own: a unique name and subject space, deleted by `dispose`. */
export interface TestStream {
  stream: string;
  /** `<prefix>.<type>`: a subject the stream captures. */
  subject(type: string): string;
  /** Publishes JSON `data` on `subject(type)`; `id` becomes Nats-Msg-Id (none when undefined). */
  publish(type: string, data: unknown, id?: string, extra?: Record<string, string>): Promise<PubAck>;
  /** Publishes raw bytes (a body that is not JSON). */
  publishRaw(type: string, body: string, id?: string): Promise<PubAck>;
  /** The durable consumer's counts, as the server tells them. */
  consumer(durable: string): Promise<{ pending: number; ackPending: number; redelivered: number }>;
  /** Messages the stream holds. */
  messages(): Promise<number>;
  dispose(): Promise<void>;
}

let shared: Promise<{ nc: NatsConnection; jsm: JetStreamManager }> | undefined;
function admin() {
  shared ??= (async () => {
    const nc = await connect({ servers: NATS, name: 'oncely tests' });
    return { nc, jsm: await jetstreamManager(nc) };
  })();
  return shared;
}

/** Closes the tests' admin connection (afterAll). */
export async function closeAdmin(): Promise<void> {
  const open = shared;
  shared = undefined;
  if (open) await (await open).nc.close();
}

/** Creates a fresh stream; `duplicateWindowMs` is JetStream's dedupe window (default 2 min). */
export async function freshStream(duplicateWindowMs?: number): Promise<TestStream> {
  const { nc, jsm } = await admin();
  const tag = randomUUID().replaceAll('-', '').slice(0, 12);
  const stream = `T_${tag}`;
  const prefix = `t_${tag}`;
  await jsm.streams.add({
    name: stream,
    subjects: [`${prefix}.>`],
    ...(duplicateWindowMs !== undefined ? { duplicate_window: duplicateWindowMs * 1_000_000 } : {}),
  });
  const js = jetstream(nc);
  const subject = (type: string) => `${prefix}.${type}`;
  const publishRaw = (type: string, body: string, id?: string, extra: Record<string, string> = {}) => {
    const h = headers();
    for (const [k, v] of Object.entries(extra)) h.set(k, v);
    return js.publish(subject(type), new TextEncoder().encode(body), {
      ...(id !== undefined ? { msgID: id } : {}),
      headers: h,
    });
  };
  return {
    stream,
    subject,
    publish: (type, data, id, extra) => publishRaw(type, JSON.stringify(data), id, extra),
    publishRaw: (type, body, id) => publishRaw(type, body, id),
    async consumer(durable) {
      const info = await jsm.consumers.info(stream, durable);
      return { pending: info.num_pending, ackPending: info.num_ack_pending, redelivered: info.num_redelivered };
    },
    async messages() {
      return (await jsm.streams.info(stream)).state.messages;
    },
    async dispose() {
      await jsm.streams.delete(stream).catch(() => {});
    },
  };
}

/** A TCP proxy in front of NATS: `drop()` closes every connection through it, as a server restart would. */
export async function natsProxy(): Promise<{ servers: string; drop(): void; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const proxy = createServer((client) => {
    const [host, port] = NATS.split(':');
    const upstream = tcp(Number(port), host);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => {});
    }
    client.pipe(upstream).pipe(client);
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const address = proxy.address();
  if (!address || typeof address === 'string') throw new Error('no proxy port');
  return {
    servers: `127.0.0.1:${address.port}`,
    drop: () => {
      for (const s of sockets) s.destroy();
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        proxy.close(() => resolve());
      }),
  };
}
