/**
 * Readiness (GET /readyz): a server can serve only with its database and any component of its own
 * (the payment service: each enabled payment provider). The event bus, where a server has one (the
 * auth server has none, and reports no bus component), is reported but not required: every event a
 * request causes goes through the outbox, in the request's own transaction, and the relay publishes
 * it once the bus is back. A server without its bus is `degraded`, still ready; taking every API
 * instance out of a balancer's rotation over a NATS blip would turn it into an outage (issue 22).
 * Each component is checked with a short deadline, all at once; a hung dependency makes the probe
 * fail fast instead of hanging the prober. Concurrent probes share one check in flight, so a
 * flood of probes against a hanging database does not pile up connection attempts.
 */
import type { Db } from '../db/knex.js'
import type { EventBus } from '../events/bus.js'

export interface ComponentStatus {
  status: 'up' | 'down'
  error?: string
  /** Something an operator must know even when up (the test provider completes payments without money). */
  warning?: string
  /** Payment providers: the methods they take. */
  methods?: string[]
}

/** A server's own component: up (with what to report) or throws / answers down with the reason. */
export type ComponentCheck = () => Promise<ComponentStatus>

export interface Readiness {
  ready: boolean
  /** Components down that the server serves without (the bus): ready, but say so. */
  degraded: string[]
  components: { database: ComponentStatus; bus?: ComponentStatus } & Record<string, ComponentStatus>
}

export const DEFAULT_READINESS_TIMEOUT_MS = 2_000
/** Driver messages can be long (a whole connection string's worth); the probe needs the gist. */
const MAX_ERROR_LENGTH = 200

export function createReadinessCheck(
  deps: { db: Db; bus?: EventBus; readinessComponents?: Record<string, ComponentCheck> },
  timeoutMs = DEFAULT_READINESS_TIMEOUT_MS,
): () => Promise<Readiness> {
  let inFlight: Promise<Readiness> | undefined
  const bus = deps.bus
  const own = Object.entries(deps.readinessComponents ?? {})
  const check = async (): Promise<Readiness> => {
    const ownStatus = Promise.all(
      own.map(async ([name, component]) => {
        let answer: ComponentStatus | undefined
        const status = await probe(timeoutMs, async () => {
          answer = await component()
        })
        return [name, status.status === 'down' ? status : (answer as ComponentStatus)] as const
      }),
    )
    const [database, busStatus] = await Promise.all([
      probe(timeoutMs, async () => {
        await deps.db.raw('select 1').timeout(timeoutMs, { cancel: false })
      }),
      bus
        ? probe(timeoutMs, async () => {
            const health = await bus.health()
            if (!health.ok) throw new Error(health.error)
          })
        : undefined,
    ])
    const others = Object.fromEntries(await ownStatus)
    const ready = database.status === 'up' && Object.values(others).every((c) => c.status === 'up')
    const degraded = busStatus?.status === 'down' ? ['bus'] : []
    return { ready, degraded, components: { ...(busStatus ? { database, bus: busStatus } : { database }), ...others } }
  }
  return () => {
    inFlight ??= check().finally(() => {
      inFlight = undefined
    })
    return inFlight
  }
}

async function probe(timeoutMs: number, run: () => Promise<void>): Promise<ComponentStatus> {
  let timer: NodeJS.Timeout | undefined
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs)
  })
  const attempt = run()
  // The attempt may settle after the deadline won; its rejection is expected, not unhandled.
  attempt.catch(() => undefined)
  try {
    await Promise.race([attempt, deadline])
    return { status: 'up' }
  } catch (err) {
    return { status: 'down', error: describe(err) }
  } finally {
    clearTimeout(timer)
  }
}

function describe(err: unknown): string {
  const text = err instanceof Error ? err.message || err.name : String(err)
  return text.length > MAX_ERROR_LENGTH ? `${text.slice(0, MAX_ERROR_LENGTH - 3)}...` : text
}
