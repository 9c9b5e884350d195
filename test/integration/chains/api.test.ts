import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterEach, describe, expect, it } from 'vitest'
import { createApiRateLimiter } from '../../../src/auth/api-rate-limit.js'
import { authenticatorFromSettings } from '../../../src/auth/authenticator.js'
import { openChainCatalogue, type ChainCatalogueSource } from '../../../src/config/chain-source.js'
import type { Db } from '../../../src/db/knex.js'
import { controlPlaneRoutes } from '../../../src/http/routes/index.js'
import { createLogger } from '../../../src/log.js'
import { DIALECTS } from '../../helpers/db.js'
import { isErrorBody, newKey, newUser } from '../auth/api-harness.js'
import { getJson, LogCapture, Resources } from '../http/harness.js'

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')
const resources = new Resources()
afterEach(() => resources.cleanup())

const CHAIN_KEYS = ['default_version', 'description', 'durations', 'id', 'inputs', 'name', 'node_types', 'unavailable_versions', 'versions']
const INPUT_KEYS = ['key_type', 'name', 'phase', 'required', 'source', 'type']

interface ChainBody {
  id: string
  name: string
  [key: string]: unknown
}
interface CatalogueBody {
  version: string
  chains: ChainBody[]
}

/** A config dir holding a copy of the devnet chain as `latest`, and the source over it (closed after the test). */
async function catalogueSource(): Promise<{ dir: string; source: ChainCatalogueSource }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-chains-api-'))
  resources.add(async () => fs.rmSync(dir, { recursive: true, force: true }))
  fs.cpSync(path.join(repoRoot, 'chains', 'devnet'), path.join(dir, 'chains', 'devnet'), { recursive: true })
  const source = await openChainCatalogue({ configDir: dir, version: 'latest', checkIntervalMs: 0, logger: createLogger({ destination: new LogCapture(), level: 'silent' }) })
  resources.add(async () => source.close())
  return { dir, source }
}

async function startApi(db: Db, source: ChainCatalogueSource) {
  const { authenticate } = authenticatorFromSettings(
    { AUTH_PROVIDER: 'idp', AUTH_IDP_AUTHORIZED_PARTY: [], AUTH_CLOCK_SKEW: 30_000, AUTH_LEGACY_JWKS_URL: 'http://127.0.0.1:9/.well-known/jwks.json' },
    { db },
  )
  const limiter = createApiRateLimiter({ perMinute: 10_000 })
  const api = await resources.api({ db, authenticate, rateLimit: limiter.rateLimit, routes: controlPlaneRoutes({ db, chains: source }) })
  return (apiKey?: string) => getJson(`${api.url}/api/v1/chains`, apiKey === undefined ? {} : { headers: { 'x-api-key': apiKey } })
}

describe.each(DIALECTS)('chains API on %s', (dialect) => {
  it('refuses anonymous callers (401) and credentials without chains:read (403)', async () => {
    const { db } = await resources.database(dialect)
    const { source } = await catalogueSource()
    const get = await startApi(db, source)
    const user = await newUser(db)
    const scopeless = (await newKey(db, user.id, { scopes: ['nodes:read', 'subscriptions:read'] })).key

    const anonymous = await get()
    expect(anonymous.status).toBe(401)
    expect(isErrorBody(anonymous.body)).toBe(true)
    const forbidden = await get(scopeless)
    expect(forbidden.status).toBe(403)
    expect((forbidden.body as { details: string }).details).toContain('chains:read')
    expect((await get((await newKey(db, user.id, { scopes: ['chains:read'] })).key)).status).toBe(200)
    expect((await get((await newKey(db, user.id, { scopes: ['*'] })).key)).status).toBe(200)
  })

  it('lists the chains on offer without placement, artifacts, checksums or templates, and follows a reload', async () => {
    const { db } = await resources.database(dialect)
    const { dir, source } = await catalogueSource()
    const get = await startApi(db, source)
    const user = await newUser(db)
    const key = (await newKey(db, user.id, { scopes: ['chains:read'] })).key

    const first = await get(key)
    expect(first.status).toBe(200)
    const body = first.body as CatalogueBody
    expect(Object.keys(body).sort()).toEqual(['chains', 'version'])
    expect(body.version).toBe(source.version)
    expect(body.chains.map((c) => c.id)).toEqual(['devnet'])
    const devnet = body.chains[0] as ChainBody
    expect(Object.keys(devnet).sort()).toEqual(CHAIN_KEYS)
    const profile = source.current().profiles.get('devnet')
    if (!profile) throw new Error('the devnet profile is missing')
    expect(devnet).toMatchObject({
      id: 'devnet',
      name: profile.name,
      description: profile.description ?? null,
      node_types: ['full', 'archive'],
      durations: ['1w', '2w', '1m', '3m', '6m'],
      default_version: profile.default_version,
      versions: profile.releases.map((r) => r.version),
    })
    const inputs = devnet.inputs as Record<string, unknown>[]
    expect(inputs.map((i) => i.name)).toEqual(profile.inputs.map((i) => i.name))
    for (const input of inputs) expect(Object.keys(input).sort()).toEqual(INPUT_KEYS)
    expect(inputs.find((i) => i.source === 'chain_generated')).toMatchObject({ type: 'secret', phase: 'pre_provision' })

    const text = JSON.stringify(body)
    for (const hidden of ['provider', 'region', 'instance_type', 'local.small', 'local.large', 'sha256"', 'file://', 'artifact', 'url', 'template', 'config_files', 'binary_name', 'run', 'probe', 'path', 'validation']) {
      expect(text, hidden).not.toContain(`"${hidden.replace(/"$/, '')}"`)
    }
    for (const release of profile.releases) expect(text).not.toContain(release.sha256)

    const profileFile = path.join(dir, 'chains', 'devnet', 'profile.yaml')
    fs.writeFileSync(profileFile, fs.readFileSync(profileFile, 'utf8').replace(/^name: .*$/m, 'name: Devnet, reloaded'))
    expect(await source.reload()).toBe(true)
    const second = (await get(key)).body as CatalogueBody
    expect(second.version).toBe(source.version)
    expect(second.version).not.toBe(body.version)
    expect(second.chains[0]?.name).toBe('Devnet, reloaded')
  })
})
