/**
 * Keeps the route table following the nodes (docs/rpc-gateway.md, "Routing"): every
 * `events.node.<id>.health_changed` drops that node's route, so its next request reads where the
 * node is now (a migration ends with `maintenance -> syncing` after the new host is recorded).
 *
 * Every gateway must see every event, so with NATS this is a plain (core) subscription of each
 * gateway's own, not a durable JetStream consumer: those share their messages between
 * subscribers. A missed event (NATS down, a reconnect) only costs staleness up to the route TTL,
 * and a node whose old address refuses connections is re-read at once (gateway.ts). In
 * `nodeplane up` the in-process bus delivers the same events to a durable of its own.
 */
import { connect, type ConnectionOptions, type NatsConnection } from 'nats'
import type { EventBus } from '../events/bus.js'
import type { Logger } from '../log.js'

export const HEALTH_EVENTS = 'events.node.*.health_changed'
const DURABLE = 'rpc-gateway-routes'

export interface RouteEvents {
  close(): Promise<void>
}

function nodeIdOf(subject: string): string | undefined {
  return subject.split('.')[2]
}

/** Core NATS subscription of this process. */
export async function followNatsHealthEvents(options: { url: string; name: string; connection?: ConnectionOptions; logger: Logger }, invalidate: (nodeId: string) => void): Promise<RouteEvents> {
  const nc: NatsConnection = await connect({ ...options.connection, servers: options.url, name: options.name, maxReconnectAttempts: -1, reconnectTimeWait: 1_000 })
  const sub = nc.subscribe(HEALTH_EVENTS, {
    callback: (err, msg) => {
      if (err) {
        options.logger.warn({ err }, 'rpc gateway: health event subscription error')
        return
      }
      const nodeId = nodeIdOf(msg.subject)
      if (nodeId) invalidate(nodeId)
    },
  })
  options.logger.info({ subject: HEALTH_EVENTS }, 'rpc gateway following node health events on NATS')
  return {
    async close() {
      sub.unsubscribe()
      await nc.drain().catch(() => nc.close())
    },
  }
}

/** The in-process bus of `nodeplane up`. */
export async function followBusHealthEvents(bus: EventBus, invalidate: (nodeId: string) => void): Promise<RouteEvents> {
  const sub = await bus.subscribe({ durable: DURABLE, subject: HEALTH_EVENTS }, async (message) => {
    const nodeId = nodeIdOf(message.subject)
    if (nodeId) invalidate(nodeId)
    message.ack()
  })
  return { close: () => sub.close() }
}
