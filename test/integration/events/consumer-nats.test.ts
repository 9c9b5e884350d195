import { afterAll, beforeAll } from 'vitest'
import type { EventBus } from '../../../src/events/bus.js'
import { connectNatsBus } from '../../../src/events/nats-bus.js'
import { startNats, type NatsServer } from '../../helpers/nats.js'
import { defineConsumerSuite } from './consumer-suite.js'
import { openProbe, silentLogger, type JetStreamProbe } from './support.js'

let nats: NatsServer
let bus: EventBus
let probe: JetStreamProbe

beforeAll(async () => {
  nats = await startNats()
  bus = await connectNatsBus({ url: nats.url, logger: silentLogger, name: 'consumer-test' })
  probe = await openProbe(nats.url)
})

afterAll(async () => {
  await bus?.close()
  await probe?.close()
  await nats?.destroy()
})

defineConsumerSuite('NATS JetStream', {
  async open() {
    const js = probe.nc.jetstream()
    return {
      bus,
      async publishRaw(subject, data, messageId) {
        await js.publish(subject, data, messageId ? { msgID: messageId } : undefined)
      },
      async pending(durable) {
        const info = await probe.jsm.consumers.info('EVENTS', durable)
        return info.num_pending + info.num_ack_pending
      },
    }
  },
  // The bus and server are shared by the file; each test uses its own subject and durable.
  async close() {},
})
