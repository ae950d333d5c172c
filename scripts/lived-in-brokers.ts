// The brokers' part of scripts/lived-in.sh: another application's exchange, queues (with messages waiting)
// and JetStream stream (with messages and a durable consumer). Each is topped up to its count, so a
// second run only reads the counts.
import { AckPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import amqp from 'amqplib';

const RABBITMQ_URL = process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const NATS_URL = process.env.NATS_URL ?? '127.0.0.1:4222';
const WAITING = 500;
const STREAMED = 2000;

async function rabbitmq(): Promise<string> {
  const connection = await amqp.connect(RABBITMQ_URL, { clientProperties: { connection_name: 'shopfront lived-in' } });
  try {
    const channel = await connection.createConfirmChannel();
    await channel.assertExchange('shopfront.events', 'topic', { durable: true });
    const added: string[] = [];
    for (const [queue, pattern] of [
      ['shopfront.orders', 'order.*'],
      ['shopfront.mail', 'mail.*'],
    ] as const) {
      await channel.assertQueue(queue, { durable: true });
      await channel.bindQueue(queue, 'shopfront.events', pattern);
      const { messageCount } = await channel.checkQueue(queue);
      const missing = Math.max(0, WAITING - messageCount);
      const topic = pattern.replace('*', 'created');
      for (let i = 0; i < missing; i++)
        channel.publish('shopfront.events', topic, Buffer.from(JSON.stringify({ n: messageCount + i })), {
          persistent: true,
          contentType: 'application/json',
        });
      await channel.waitForConfirms();
      added.push(`${queue} +${missing}`);
    }
    return `RabbitMQ: exchange shopfront.events, queues ${added.join(', ')}`;
  } finally {
    await connection.close();
  }
}

async function nats(): Promise<string> {
  const nc = await connect({ servers: NATS_URL, name: 'shopfront lived-in' });
  try {
    const jsm = await jetstreamManager(nc);
    const held = await jsm.streams.info('SHOPFRONT').then(
      (info) => info.state.messages,
      async () => {
        await jsm.streams.add({ name: 'SHOPFRONT', subjects: ['shopfront.>'] });
        return 0;
      },
    );
    const js = jetstream(nc);
    const body = new TextEncoder().encode(JSON.stringify({ state: 'paid' }));
    // Acknowledged in batches: one at a time would take seconds, all at once floods the connection.
    for (let i = held; i < STREAMED; i += 100) {
      const batch = Array.from({ length: Math.min(100, STREAMED - i) }, () =>
        js.publish('shopfront.orders.paid', body),
      );
      await Promise.all(batch);
    }
    await jsm.consumers
      .info('SHOPFRONT', 'fulfilment')
      .catch(() => jsm.consumers.add('SHOPFRONT', { durable_name: 'fulfilment', ack_policy: AckPolicy.Explicit }));
    return `NATS: stream SHOPFRONT +${Math.max(0, STREAMED - held)} messages, consumer fulfilment`;
  } finally {
    await nc.close();
  }
}

for (const line of await Promise.all([rabbitmq(), nats()])) console.log(`lived-in: ${line}`);
