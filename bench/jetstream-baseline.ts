/**
 * The payments benches' baseline: bare JetStream round trips, a publish with its PubAck awaited
 * to a pull consumer on the EVENTS stream, one at a time (p50, p99) and as a burst (per second).
 */
import crypto from 'node:crypto'
import { AckPolicy, DeliverPolicy, connect } from 'nats'
import { connectNatsBus } from '../src/events/nats-bus.js'
import { createLogger } from '../src/log.js'

export function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] ?? 0
}

export async function bareJetStream(natsUrl: string, latencyRuns: number, burst: number, name: string): Promise<{ p50: number; p99: number; rate: number }> {
  const logger = createLogger({ level: 'silent' })
  const run = crypto.randomBytes(4).toString('hex')
  const nc = await connect({ servers: natsUrl, name: `${name}-baseline` })
  const setupBus = await connectNatsBus({ url: natsUrl, logger, name: `${name}-setup` }) // makes the streams
  const js = nc.jetstream()
  const jsm = await nc.jetstreamManager()
  const subject = `events.bench.${run}.rtt`
  const durable = `${name}-rtt-${run}`
  await jsm.consumers.add('EVENTS', { durable_name: durable, filter_subject: subject, ack_policy: AckPolicy.Explicit, deliver_policy: DeliverPolicy.New })
  const received = new Map<string, () => void>()
  const messages = await (await js.consumers.get('EVENTS', durable)).consume({ max_messages: 64 })
  const pump = (async () => {
    for await (const m of messages) {
      m.ack()
      received.get(m.headers?.get('Nats-Msg-Id') ?? '')?.()
    }
  })()
  try {
    const roundTrip = async (): Promise<void> => {
      const id = crypto.randomUUID()
      const arrived = new Promise<void>((resolve) => received.set(id, resolve))
      await js.publish(subject, new TextEncoder().encode(JSON.stringify({ id, at: Date.now() })), { msgID: id })
      await arrived
      received.delete(id)
    }
    for (let i = 0; i < 20; i++) await roundTrip()
    const latencies: number[] = []
    for (let i = 0; i < latencyRuns; i++) {
      const t0 = performance.now()
      await roundTrip()
      latencies.push(performance.now() - t0)
    }
    latencies.sort((a, b) => a - b)
    const started = performance.now()
    await Promise.all(Array.from({ length: burst }, () => roundTrip()))
    const rate = burst / ((performance.now() - started) / 1000)
    return { p50: percentile(latencies, 0.5), p99: percentile(latencies, 0.99), rate }
  } finally {
    messages.stop()
    await pump
    await jsm.consumers.delete('EVENTS', durable).catch(() => undefined)
    await nc.close()
    await setupBus.close()
  }
}
