/** Public surface of the events domain (docs/events.md). */
export type { BusComponentHealth, BusMessage, BusPublish, BusSubscription, EventBus, SubscribeOptions } from './bus.js'
export { STREAMS } from './bus.js'
export {
  createEventHandler,
  defaultRetryDelayMs,
  runConsumer,
  type ConsumerOptions,
  type ConsumerOutcome,
  type ConsumerOutcomeInfo,
} from './consumer.js'
export { encodePayload, IDEMPOTENCY_KEY_FIELD, openEnvelope, type EventEnvelope, type EventPayload } from './envelope.js'
export {
  AlreadyProcessedError,
  findProcessed,
  idempotencyKey,
  isProcessed,
  markProcessed,
  purgeExpired,
  type ProcessedKey,
} from './idempotency.js'
export { createLocalBus, type LocalBus, type LocalBusOptions } from './local-bus.js'
export { connectNatsBus, type NatsBusOptions } from './nats-bus.js'
export { openEventBus, type OpenEventBusOptions } from './open-bus.js'
export {
  countUnpublished,
  enqueueEvent,
  enqueueEvents,
  MAX_EVENT_PAYLOAD_BYTES,
  onOutboxCommit,
  type OutboxEvent,
  type OutboxRow,
} from './outbox.js'
export { markPublished, OutboxRelay, purgePublished, type OutboxRelayOptions, type RelayCycle, type RelayMetrics } from './relay.js'
export { assertPublishableSubject, streamForFilter, streamForSubject, subjectWithin } from './subjects.js'
