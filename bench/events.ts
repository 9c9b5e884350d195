/**
 * Outbox relay throughput to NATS: N rows committed beforehand (in batches), then the time for
 * one relay to publish all N (claim, publish awaiting each PubAck, mark), against a bare loop of
 * N awaited JetStream publishes with a msgID on the same server, same run, same payload. The
 * relay pipelines each claimed batch on one connection (publishes issued in id order, PubAcks
 * awaited together), so it should beat the bare loop despite its two database statements per
 * batch. Aim: >= 1 (first measured here at ~2.5 on both dialects, 2 cores).
 */
import crypto from 'node:crypto'
import { connect } from 'nats'
import { createLogger } from '../src/log.js'
import { connectNatsBus } from '../src/events/nats-bus.js'
import { enqueueEvents, countUnpublished, type OutboxEvent } from '../src/events/outbox.js'
import { OutboxRelay } from '../src/events/relay.js'
import { benchDatabase, type Dialect } from './databases.js'
import { figure, type Bench, type BenchFigure } from './lib.js'

const ENQUEUE_BATCH = 500

function payload(n: number): Record<string, unknown> {
  return { node_id: crypto.randomUUID(), upgrade_phase: 'downloading', progress: n % 100, at: new Date().toISOString() }
}

export const benchEvents: Bench = async (ctx) => {
  const n = Math.max(200, Math.round(5_000 * ctx.scale))
  const logger = createLogger({ level: 'silent' })
  const run = crypto.randomBytes(4).toString('hex')
  const bus = await connectNatsBus({ url: ctx.natsUrl, logger, name: 'bench-events' })
  const nc = await connect({ servers: ctx.natsUrl, name: 'bench-events-baseline' })
  const js = nc.jetstream()
  const encoder = new TextEncoder()
  const figures: BenchFigure[] = []

  /** Bare loop: N awaited publishes with a msgID; returns messages/s. */
  const bareLoop = async (subject: string): Promise<number> => {
    const bodies = Array.from({ length: n }, (_, i) => encoder.encode(JSON.stringify(payload(i))))
    const started = performance.now()
    for (const body of bodies) await js.publish(subject, body, { msgID: crypto.randomUUID() })
    return n / ((performance.now() - started) / 1000)
  }

  try {
    // Warm-up: the connection, the stream's first writes and the JIT.
    await bareLoop(`events.bench.${run}.warmup`)

    for (const dialect of ['sqlite', 'postgres'] as Dialect[]) {
      const database = await benchDatabase(dialect, ctx.postgresUrl)
      const { db } = database
      try {
        const subject = `events.bench.${run}.${dialect}`
        for (let i = 0; i < n; i += ENQUEUE_BATCH) {
          const events: OutboxEvent[] = []
          for (let j = i; j < Math.min(n, i + ENQUEUE_BATCH); j++) events.push({ subject: `${subject}.relay`, payload: payload(j) })
          await db.transaction((trx) => enqueueEvents(trx, events))
        }

        const bare = await bareLoop(`${subject}.bare`)

        const relay = new OutboxRelay({ db, bus, logger, wakeOnCommit: false })
        const started = performance.now()
        let published = 0
        while (published < n) {
          const count = await relay.runOnce()
          if (count === 0) throw new Error(`relay stalled after ${published} of ${n} events`)
          published += count
        }
        const relayRate = n / ((performance.now() - started) / 1000)
        const left = await countUnpublished(db)
        if (left !== 0) throw new Error(`${left} outbox rows left unpublished`)

        ctx.log(`${dialect}: relay ${relayRate.toFixed(0)}/s, bare publish loop ${bare.toFixed(0)}/s (n=${n})`)
        figures.push(
          figure({
            name: `outbox relay to NATS (${dialect})`,
            baseline: 'awaited JetStream publish loop with msgID',
            unit: 'events/s',
            value: relayRate,
            baselineValue: bare,
            aim: '>= 1',
            notes: `${n} committed rows, batches of 100 claimed, published and marked`,
          }),
        )
      } finally {
        await database.drop()
      }
    }
  } finally {
    await nc.close()
    await bus.close()
  }
  return figures
}
