import { defineConsumerSuite } from './consumer-suite.js'
import { createLocalBus, type LocalBus } from '../../../src/events/local-bus.js'

defineConsumerSuite('in-process', {
  async open() {
    const bus: LocalBus = createLocalBus()
    return {
      bus,
      publishRaw: (subject, data, messageId) => bus.publish({ subject, data, messageId: messageId ?? '' }),
      pending: async (durable) => bus.pending(durable),
    }
  },
  async close(fixture) {
    await fixture.bus.close()
  },
})
