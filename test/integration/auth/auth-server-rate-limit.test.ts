/**
 * The auth server's rate limit: AUTH_RATE_LIMIT_PER_MINUTE per client on /auth/*, a token bucket
 * (GCRA) kept in the database and so shared by every instance on it, 429 with Retry-After;
 * per-instance counting (logged once) while the database is unavailable, and back (logged once)
 * after. Behind a proxy the client is the address HTTP_MAX_IPS_COUNT hops from the right of
 * X-Forwarded-For, never what the client wrote to the left of it.
 */
import { afterEach, describe, expect, it } from 'vitest'
import { createAuthRateLimiter } from '../../../src/auth/auth-rate-limit.js'
import { RateLimitedError } from '../../../src/errors.js'
import { createLogger } from '../../../src/log.js'
import { createDatabase } from '../../../src/db/knex.js'
import { migrateLatest } from '../../../src/db/migrate.js'
import { DIALECTS } from '../../helpers/db.js'
import { startPostgres } from '../../helpers/postgres.js'
import { waitFor } from '../../helpers/ports.js'
import { LogCapture, Resources } from '../http/harness.js'
import { deliverWebhook, postJson, startTestAuthServer, TestClock, webhookSecret } from './auth-server-support.js'

const ADDRESS = '0x52908400098527886E0F7030069857D2E4169EE7'

async function nonceStatus(url: string): Promise<number> {
  return (await fetch(`${url}/auth/nonce?address=${ADDRESS}`)).status
}

describe.each(DIALECTS)('auth server rate limit on %s', (dialect) => {
  const resources = new Resources()
  afterEach(() => resources.cleanup())

  it('allows the limit at once on /auth/*, then 429 with Retry-After until a request fits again', async () => {
    const t = await resources.database(dialect)
    const clock = new TestClock()
    const secret = webhookSecret()
    const { url } = await startTestAuthServer(resources, t.db, {
      clock,
      settings: { AUTH_RATE_LIMIT_PER_MINUTE: 3, AUTH_PROVIDER: 'both', AUTH_IDP_WEBHOOK_SIGNING_SECRET: secret },
    })
    expect(await nonceStatus(url)).toBe(200)
    // Every /auth/* route draws from the same budget, refused or malformed requests included.
    expect((await fetch(`${url}/auth/nonce`)).status).toBe(400)
    expect((await postJson(`${url}/auth/logout`, { refresh_token: 'npr_unknown' })).status).toBe(204)

    const refused = await fetch(`${url}/auth/nonce?address=${ADDRESS}`)
    expect(refused.status).toBe(429)
    // 3 per minute: one request's worth comes back every 20 s.
    expect(refused.headers.get('retry-after')).toBe('20')
    expect(await refused.json()).toMatchObject({ error: 'rate limit exceeded', details: expect.stringContaining('3 requests per minute') })
    expect((await postJson(`${url}/auth/verify`, {})).status).toBe(429)

    // Not limited: health, the key set, the webhook.
    for (let i = 0; i < 4; i++) {
      expect((await fetch(`${url}/health`)).status).toBe(200)
      expect((await fetch(`${url}/.well-known/jwks.json`)).status).toBe(200)
      expect((await deliverWebhook(url, { secret, timestamp: clock.seconds, body: { type: 'ping', data: {} } })).status).toBe(200)
    }

    clock.advance(19_000)
    expect(await nonceStatus(url)).toBe(429)
    clock.advance(1_000)
    expect(await nonceStatus(url)).toBe(200)
    expect(await nonceStatus(url)).toBe(429)
    const row = (await t.db('auth_rate_buckets').first()) as { client_key: string; admitted: number | boolean }
    expect(row.client_key).toMatch(/^ip:/)
    expect(Number(row.admitted)).toBe(0)
  })

  it('a burst straddling a minute boundary gets the limit once, not twice', async () => {
    const t = await resources.database(dialect)
    const clock = new TestClock(Date.parse('2030-01-07T10:00:59.500Z'))
    const { url } = await startTestAuthServer(resources, t.db, { clock, settings: { AUTH_RATE_LIMIT_PER_MINUTE: 5 } })
    for (let i = 0; i < 5; i++) expect(await nonceStatus(url)).toBe(200)
    expect(await nonceStatus(url)).toBe(429)
    // One second later, in the next clock minute: a fixed window would start a fresh budget of 5.
    clock.advance(1_000)
    const after = await Promise.all(Array.from({ length: 5 }, () => nonceStatus(url)))
    expect(after.every((s) => s === 429)).toBe(true)
    // Refused requests do not push the wait further: a request fits once 12 s (60 s / 5) have passed.
    clock.advance(11_000)
    expect(await nonceStatus(url)).toBe(200)
    expect(await nonceStatus(url)).toBe(429)
    // After the burst the client gets the refill only: one request per 12 s, whatever it sends.
    const statuses: number[] = []
    for (let i = 0; i < 48; i++) {
      clock.advance(1_000)
      statuses.push(await nonceStatus(url))
    }
    expect(statuses.filter((s) => s === 200)).toHaveLength(4)
  })

  it('behind a proxy, a forged leftmost X-Forwarded-For entry does not buy a fresh budget', async () => {
    const t = await resources.database(dialect)
    const clock = new TestClock()
    const { url } = await startTestAuthServer(resources, t.db, { clock, settings: { AUTH_RATE_LIMIT_PER_MINUTE: 3, HTTP_TRUST_PROXY: true, HTTP_MAX_IPS_COUNT: 1 } })
    // The client writes any address it likes; the one proxy appends the address it saw (the last entry).
    const viaProxy = (forged: string, seen = '203.0.113.7') =>
      fetch(`${url}/auth/nonce?address=${ADDRESS}`, { headers: { 'X-Forwarded-For': `${forged}, ${seen}` } }).then((r) => r.status)
    const statuses = []
    for (let i = 0; i < 6; i++) statuses.push(await viaProxy(`10.0.${i}.1`))
    expect(statuses).toEqual([200, 200, 200, 429, 429, 429])
    // A client the proxy saw at another address has its own budget.
    expect(await viaProxy('10.0.0.1', '198.51.100.9')).toBe(200)
    const keys = (await t.db('auth_rate_buckets').select('client_key')).map((r: { client_key: string }) => r.client_key).sort()
    expect(keys).toEqual(['ip:198.51.100.9', 'ip:203.0.113.7'])
  })

  it('falls back to per-instance counting when counting in the database fails, logging once each way', async () => {
    const t = await resources.database(dialect)
    const clock = new TestClock()
    const logs = new LogCapture()
    const limiter = createAuthRateLimiter({
      db: t.db,
      limitPerMinute: 2,
      logger: createLogger({ destination: logs, level: 'debug' }),
      now: clock.now,
      retryDatabaseAfterMs: 5_000,
    })
    await limiter.hit('ip:a')
    expect(limiter.store).toBe('database')

    await t.db.schema.renameTable('auth_rate_buckets', 'auth_rate_buckets_away')
    await limiter.hit('ip:a') // the database failed; counted in memory from here (1)
    expect(limiter.store).toBe('memory')
    await limiter.hit('ip:a') // 2
    await expect(limiter.hit('ip:a')).rejects.toBeInstanceOf(RateLimitedError)
    await limiter.hit('ip:b')
    const down = logs.lines.filter((l) => String(l.msg).startsWith('rate limit database unavailable'))
    expect(down).toHaveLength(1)
    expect(down[0]?.level).toBe('warn')

    await t.db.schema.renameTable('auth_rate_buckets_away', 'auth_rate_buckets')
    clock.advance(4_000)
    await limiter.hit('ip:c')
    expect(limiter.store).toBe('memory') // not retried before 5 s
    clock.advance(1_000)
    await limiter.hit('ip:c')
    expect(limiter.store).toBe('database')
    await limiter.hit('ip:c')
    expect(logs.lines.filter((l) => String(l.msg).startsWith('rate limit counting is back in the database'))).toHaveLength(1)
    expect(logs.lines.filter((l) => String(l.msg).startsWith('rate limit database unavailable'))).toHaveLength(1)
  })
})

describe('auth server rate limit shared on Postgres', () => {
  const resources = new Resources()
  afterEach(() => resources.cleanup())

  it('two auth-server instances on one database share the budget: 20 in total, then 429 on both', async () => {
    const t = await resources.database('postgres')
    const clock = new TestClock()
    const settings = { AUTH_RATE_LIMIT_PER_MINUTE: 20 }
    const one = await startTestAuthServer(resources, t.connect(), { clock, settings })
    const two = await startTestAuthServer(resources, t.connect(), { clock, settings })
    const statuses = await Promise.all(Array.from({ length: 20 }, (_, i) => nonceStatus(i % 2 === 0 ? one.url : two.url)))
    expect(statuses.every((s) => s === 200)).toBe(true)
    expect(await nonceStatus(one.url)).toBe(429)
    expect(await nonceStatus(two.url)).toBe(429)
    const rows = (await t.db('auth_rate_buckets').select()) as Array<{ client_key: string; admitted: number }>
    // One bucket for the one client, whichever instance served it; the last request was refused.
    expect(rows).toHaveLength(1)
    expect(rows[0]?.client_key).toMatch(/^ip:/)
    expect(Number(rows[0]?.admitted)).toBe(0)
  })

  it('keeps serving with per-instance counting when its database pool is gone, and says so once', async () => {
    const t = await resources.database('postgres')
    const clock = new TestClock()
    const db = t.connect()
    const { url, logs } = await startTestAuthServer(resources, db, { clock, settings: { AUTH_RATE_LIMIT_PER_MINUTE: 3 } })
    expect(await nonceStatus(url)).toBe(200)
    await db.destroy()

    // A request the server can answer without its database (a 400) is still served, counted in memory.
    const started = Date.now()
    for (let i = 0; i < 3; i++) expect((await fetch(`${url}/auth/nonce`)).status).toBe(400)
    expect((await fetch(`${url}/auth/nonce`)).status).toBe(429)
    expect(Date.now() - started).toBeLessThan(5_000)
    const lines = logs.lines.filter((l) => String(l.msg).startsWith('rate limit database unavailable'))
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatchObject({ level: 'warn', daemon: 'auth-server' })
  })

  it('keeps serving when the Postgres server itself stops, and counts in the database again once it is back', async () => {
    const server = await startPostgres()
    resources.add(() => server.stop())
    const driverLogs = new LogCapture()
    const db = createDatabase(server.url, { logger: createLogger({ destination: driverLogs, level: 'debug' }) })
    resources.add(() => db.destroy())
    await migrateLatest(db, 'control-plane')
    const clock = new TestClock()
    const { url, logs } = await startTestAuthServer(resources, db, { clock, settings: { AUTH_RATE_LIMIT_PER_MINUTE: 4 } })
    expect(await nonceStatus(url)).toBe(200)

    await server.pause()
    // Counting restarts in memory: the budget of 4 holds again within this instance.
    for (let i = 0; i < 4; i++) expect((await fetch(`${url}/auth/nonce`)).status).toBe(400)
    expect((await fetch(`${url}/auth/nonce`)).status).toBe(429)
    const down = logs.lines.filter((l) => String(l.msg).startsWith('rate limit database unavailable'))
    expect(down).toHaveLength(1)

    await server.resume()
    clock.advance(60_000)
    await waitFor(async () => {
      await fetch(`${url}/auth/nonce`)
      return logs.lines.some((l) => String(l.msg).startsWith('rate limit counting is back in the database'))
    }, 'the rate limit to use the database again')
    expect(await db('auth_rate_buckets').count({ n: '*' }).first()).toMatchObject({ n: expect.anything() })
    expect(Number(((await db('auth_rate_buckets').count({ n: '*' }).first()) as { n: number | string }).n)).toBeGreaterThanOrEqual(1)
    // The driver's own complaints about the outage went to the structured log, not the console.
    expect(driverLogs.lines.some((l) => l.msg === 'database driver warning' && l.component === 'database')).toBe(true)
  })
})
