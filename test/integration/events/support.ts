/**
 * Shared pieces of the events integration tests: a silent logger, unique subjects, and
 * JetStream probes that count what a stream actually stored.
 */
import crypto from 'node:crypto'
import { connect, type JetStreamManager, type NatsConnection } from 'nats'
import { createLogger } from '../../../src/log.js'
import type { Db } from '../../../src/db/knex.js'
import { waitFor } from '../../helpers/ports.js'

export const silentLogger = createLogger({ level: 'silent' })

/** A subject prefix no other test uses: `events.test.<random>`. */
export function uniqueSubjectPrefix(): string {
  return `events.test.${crypto.randomBytes(5).toString('hex')}`
}

export interface JetStreamProbe {
  nc: NatsConnection
  jsm: JetStreamManager
  /** Messages stored in `stream` on subjects matching `filter`. */
  stored(filter: string, stream?: string): Promise<number>
  /** Waits until the probe's own connection answers again (after a server restart). */
  ready(): Promise<void>
  close(): Promise<void>
}

export async function openProbe(url: string): Promise<JetStreamProbe> {
  const nc = await connect({ servers: url, maxReconnectAttempts: -1, reconnectTimeWait: 100, name: 'test-probe' })
  const jsm = await nc.jetstreamManager({ timeout: 1_000 })
  return {
    nc,
    jsm,
    async stored(filter, stream = 'EVENTS') {
      const info = await jsm.streams.info(stream, { subjects_filter: filter })
      return Object.values(info.state.subjects ?? {}).reduce((sum, n) => sum + n, 0)
    },
    async ready() {
      await waitFor(async () => (await jsm.getAccountInfo()) !== undefined, 'the probe to reach JetStream')
    },
    async close() {
      await nc.close()
    },
  }
}

export async function outboxRows(db: Db): Promise<Array<Record<string, unknown>>> {
  return db('outbox').select('*').orderBy('id')
}
