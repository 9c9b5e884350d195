/**
 * The security finding of issue 17 at rollout creation, through the api-server daemon configured
 * from its environment, on both databases: free artifact URLs are denied by default. A URL is
 * accepted only under ARTIFACT_ALLOWED_SOURCES or as exactly a release of the chain profile;
 * anything else (a file on the hosts such as `file:///…/master.key`, loopback, link-local,
 * private, and a public host too) is refused with 400 naming the field and the setting, and
 * nothing is written. Manifests (rollouts and groups) obey the same rule; no answer and no log
 * line carries the digest of the file that is not an artifact, nor a URL's credentials.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startApiServer } from '../../../daemons/api-server.js'
import { apiServerEnv, loadConfig } from '../../../src/config/env.js'
import { loadChainCatalogue } from '../../../src/config/chains.js'
import type { Db } from '../../../src/db/knex.js'
import { ConfigError, ValidationError } from '../../../src/errors.js'
import { createLogger } from '../../../src/log.js'
import { createRollout, createRolloutGroup } from '../../../src/rollouts/create.js'
import { DIALECTS } from '../../helpers/db.js'
import { tempDir } from '../../helpers/cli.js'
import { newKey, newUser } from '../auth/api-harness.js'
import { getJson, LogCapture, Resources } from '../http/harness.js'
import { T0 } from './helpers.js'

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')
const release110 = path.join(repoRoot, 'chains/devnet/releases/devnet-node-1.1.0.mjs')
const sha256 = (bytes: Buffer) => crypto.createHash('sha256').update(bytes).digest('hex')

// A host's secret beside an allowed directory of artifacts (and a sibling whose name extends it).
const dir = tempDir()
const masterKey = path.join(dir, 'master.key')
fs.writeFileSync(masterKey, crypto.randomBytes(32))
const masterKeyDigest = sha256(fs.readFileSync(masterKey))
const allowedDir = path.join(dir, 'allowed')
fs.mkdirSync(allowedDir)
fs.copyFileSync(release110, path.join(allowedDir, 'devnet-node-1.1.0.mjs'))
fs.mkdirSync(path.join(dir, 'allowed-evil'))
fs.copyFileSync(release110, path.join(dir, 'allowed-evil', 'devnet-node-1.1.0.mjs'))
const CHECKSUM_110 = `sha256:${sha256(fs.readFileSync(release110))}`

const MANUAL = { chain_profile_id: 'devnet', node_type: 'full', source_version: '1.0.0', binary_name: 'devnet-node', target_version: '1.1.0', target_binary_checksum: CHECKSUM_110 }

/** URLs that reach the hosts themselves or the networks behind them. */
const REFUSED: [string, RegExp][] = [
  [pathToFileURL(masterKey).href, /is a file on the node hosts \(file:\/\/\)/],
  [`${pathToFileURL(allowedDir).href}/../master.key`, /is a file on the node hosts/],
  [pathToFileURL(path.join(dir, 'allowed-evil', 'devnet-node-1.1.0.mjs')).href, /is a file on the node hosts/],
  ['http://127.0.0.1:4222/varz', /host 127\.0\.0\.1 is a loopback address/],
  ['http://localhost:8080/api/v1/me', /host localhost is a loopback name/],
  ['http://2130706433/x', /host 127\.0\.0\.1 is a loopback address/],
  ['https://[::1]/x', /host \[::1\] is a loopback address/],
  ['http://[::ffff:127.0.0.1]:9090/x', /is a loopback address/],
  ['http://169.254.169.254/latest/meta-data/', /is a link-local address/],
  ['http://[fe80::1]/x', /is a link-local address/],
  ['http://10.1.2.3/x', /is a private address/],
  ['http://172.20.0.1/x', /is a private address/],
  ['http://192.168.0.10/x', /is a private address/],
  ['http://[fd12:3456::1]/x', /is a private \(unique local\) address/],
  ['http://0.0.0.0:8545/', /is an unspecified address/],
]

/** Public hosts: as free as any other URL, so refused unless allowed (the server allows https://releases.example.test/). */
const PUBLIC_REFUSED: string[] = [
  'https://downloads.example.org/devnet-node-1.1.0.mjs',
  // Beside the allowed source: another scheme, a host whose name extends it, a sibling path.
  'http://releases.example.test/devnet-node-1.1.0.mjs',
  'https://releases.example.test.evil.example/devnet-node-1.1.0.mjs',
  'https://releases.example.test:8443/devnet-node-1.1.0.mjs',
  // A public name that resolves to 127.0.0.1: judged as written, and refused because it is not listed.
  'http://localtest.me:4222/varz',
]

describe('ARTIFACT_ALLOWED_SOURCES', () => {
  it('is a comma-separated list of URL prefixes ending in "/"; anything else stops the daemon naming the variable', () => {
    expect(loadConfig(apiServerEnv, {}).ARTIFACT_ALLOWED_SOURCES).toEqual([])
    expect(loadConfig(apiServerEnv, { ARTIFACT_ALLOWED_SOURCES: ' file:///srv/releases/ , http://10.0.0.7:9000/artifacts/' }).ARTIFACT_ALLOWED_SOURCES).toEqual([
      'file:///srv/releases/',
      'http://10.0.0.7:9000/artifacts/',
    ])
    for (const bad of ['file:///srv/releases', 'ftp://host/', 'releases/', 'https://user:pw@host/']) {
      expect(() => loadConfig(apiServerEnv, { ARTIFACT_ALLOWED_SOURCES: bad }), bad).toThrow(ConfigError)
      try {
        loadConfig(apiServerEnv, { ARTIFACT_ALLOWED_SOURCES: bad })
      } catch (err) {
        expect((err as ConfigError).problems.join('\n')).toContain('ARTIFACT_ALLOWED_SOURCES')
      }
    }
  })
})

describe.each(DIALECTS)('artifact sources at rollout creation on %s', (dialect) => {
  const resources = new Resources()
  let db: Db
  let url: string
  let key: string
  const logs = new LogCapture()
  beforeAll(async () => {
    db = (await resources.database(dialect)).db
    const config = loadConfig(apiServerEnv, { ARTIFACT_ALLOWED_SOURCES: `${pathToFileURL(allowedDir).href}/,https://releases.example.test/` })
    const server = await startApiServer({ ...config, API_SERVER_PORT: 0, HTTP_HOST: '127.0.0.1' }, { db, bus: resources.localBus(), logger: createLogger({ destination: logs, level: 'debug' }) })
    resources.add(() => server.stop())
    url = server.url
    const admin = await newUser(db, { admin: true })
    key = (await newKey(db, admin.id, { scopes: ['*', 'admin'], admin: true })).key
  })
  afterAll(() => resources.cleanup())

  const post = (route: string, body: unknown) =>
    getJson(`${url}${route}`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) })
  const count = async () => Number(((await db('rollouts').count({ n: '*' }).first()) as { n: unknown }).n)

  it('refuses file://, loopback, link-local and private artifact URLs with 400 and writes nothing', async () => {
    for (const [target, reason] of REFUSED) {
      // The attacker may even know the secret's digest: the URL alone is refused.
      for (const checksum of [CHECKSUM_110, `sha256:${masterKeyDigest}`]) {
        const res = await post('/api/v1/rollouts', { ...MANUAL, target_binary_url: target, target_binary_checksum: checksum })
        expect(res.status, target).toBe(400)
        expect(res.body, target).toMatchObject({ error: 'invalid request', details: expect.stringMatching(/^body\.target_binary_url: /) })
        expect((res.body as { details: string }).details, target).toMatch(reason)
        expect((res.body as { details: string }).details).toContain('ARTIFACT_ALLOWED_SOURCES')
      }
    }
    expect(await count()).toBe(0)
    // The refused secret's digest appears in no answer above (asserted) and in no log line, even
    // the requests the attacker sent it in: the bodies are not logged.
    const text = logs.text()
    expect(text).toContain('/api/v1/rollouts')
    expect(text).not.toContain(masterKeyDigest.slice(0, 16))
  })

  it('refuses a public URL outside the allowed sources with 400 naming the field and the setting, and writes nothing', async () => {
    for (const target of PUBLIC_REFUSED) {
      const res = await post('/api/v1/rollouts', { ...MANUAL, target_binary_url: target })
      expect(res.status, target).toBe(400)
      expect(res.body, target).toEqual({
        error: 'invalid request',
        details: `body.target_binary_url: ${target} is not under an allowed source (ARTIFACT_ALLOWED_SOURCES) nor a stored artifact; add it with \`nodeplane artifact add\` and name it by binary, version and checksum, or allow its source (docs/artifacts.md)`,
      })
    }
    // Credentials in a URL put it outside every source (none carries any), and are not echoed.
    const withCredentials = await post('/api/v1/rollouts', { ...MANUAL, target_binary_url: 'https://deploy:s3cr3t-token@releases.example.test/devnet-node-1.1.0.mjs?sig=q-s3cr3t' })
    expect(withCredentials.status).toBe(400)
    expect((withCredentials.body as { details: string }).details).toMatch(/^body\.target_binary_url: https:\/\/releases\.example\.test\/devnet-node-1\.1\.0\.mjs is not under an allowed source/)
    expect(JSON.stringify(withCredentials.body)).not.toContain('s3cr3t')
    expect(logs.text()).not.toContain('s3cr3t')
    // Groups take their URLs from manifests and releases only: the same rule (below).
    expect(await count()).toBe(0)
  })

  it('accepts an allowed source (file:// and https://) and a release of the chain profile', async () => {
    const accepted = [pathToFileURL(path.join(allowedDir, 'devnet-node-1.1.0.mjs')).href, pathToFileURL(release110).href, 'https://releases.example.test/devnet-node-1.1.0.mjs']
    for (const target of accepted) {
      const res = await post('/api/v1/rollouts', { ...MANUAL, target_binary_url: target })
      expect(res.status, JSON.stringify(res.body)).toBe(201)
      const id = (res.body as { id: string }).id
      // One active rollout per chain: out of the way before the next (a pending rollout is not cancellable).
      await db('rollouts').where({ id }).update({ status: 'cancelled' })
    }
    expect(await count()).toBe(accepted.length)
  })

  it('applies the same rule to manifests, for rollouts and groups; a manifest checksum mismatch names no digest', async () => {
    const catalogue = await loadChainCatalogue(repoRoot)
    const configDir = tempDir()
    const upgrades = path.join(configDir, 'upgrades', 'devnet')
    fs.mkdirSync(upgrades, { recursive: true })
    const shipped = fs.readFileSync(path.join(repoRoot, 'upgrades/devnet/devnet-1.1.0.yaml'), 'utf8')
    // 1.2.0: not a release of the profile, whose own checksum a manifest for it would have to use.
    const withArtifact = (artifact: string, checksum: string) =>
      shipped.replace(/^artifact: .*$/m, `artifact: ${artifact}`).replace(/^checksum: .*$/m, `checksum: ${checksum}`).replace(/^target_version: .*$/m, 'target_version: "1.2.0"')
    fs.writeFileSync(path.join(upgrades, 'secret.yaml'), withArtifact(pathToFileURL(masterKey).href, `sha256:${masterKeyDigest}`))
    fs.writeFileSync(path.join(upgrades, 'mismatch.yaml'), withArtifact(pathToFileURL(masterKey).href, CHECKSUM_110))
    fs.writeFileSync(path.join(upgrades, 'allowed.yaml'), withArtifact(pathToFileURL(path.join(allowedDir, 'devnet-node-1.1.0.mjs')).href, CHECKSUM_110))
    fs.writeFileSync(path.join(upgrades, 'public.yaml'), withArtifact('https://downloads.example.org/devnet-node-1.2.0.mjs', CHECKSUM_110))
    const options = { createdBy: '00000000-0000-4000-8000-0000000000aa', catalogue, now: T0, configDir }
    const auto = (upgradeId: string) => ({ upgrade_id: upgradeId, chain_profile_id: 'devnet', node_type: 'full', source_version: '1.0.0' })
    const group = (upgradeId: string) => ({ chain_profile_id: 'devnet', node_type: 'full', failure_policy: 'manual', component_order: [{ upgrade_id: upgradeId, binary_name: 'devnet-node', node_type: 'full', version: '1.2.0' }] })
    const refusal = (promise: Promise<unknown>) => promise.then(() => undefined, (err: unknown) => err as ValidationError)

    const secret = await refusal(createRollout(db, auto('secret'), options))
    expect(secret).toBeInstanceOf(ValidationError)
    expect(secret?.details).toMatch(/^upgrades\/devnet\/secret\.yaml: artifact: file:\/\/.*master\.key is a file on the node hosts/)
    const secretGroup = await refusal(createRolloutGroup(db, group('secret'), options))
    expect(secretGroup?.details).toMatch(/^body\.component_order\[0\]\.upgrade_id: upgrades\/devnet\/secret\.yaml: artifact: .* is a file on the node hosts/)
    const mismatch = await refusal(createRollout(db, auto('mismatch'), options))
    expect(mismatch?.details).toContain('does not match the artifact (checksum mismatch)')
    for (const err of [secret, secretGroup, mismatch]) expect(JSON.stringify({ message: err?.message, details: err?.details })).not.toContain(masterKeyDigest.slice(0, 16))
    expect(await count()).toBe(3)

    // A manifest naming a public URL is as free as a manual body: refused for rollouts and groups.
    const publicUrl = await refusal(createRollout(db, auto('public'), options))
    expect(publicUrl?.details).toBe(
      'upgrades/devnet/public.yaml: artifact: https://downloads.example.org/devnet-node-1.2.0.mjs is not under an allowed source (ARTIFACT_ALLOWED_SOURCES) nor a stored artifact; add it with `nodeplane artifact add` and name it by binary, version and checksum, or allow its source (docs/artifacts.md)',
    )
    const publicGroup = await refusal(createRolloutGroup(db, group('public'), options))
    expect(publicGroup?.details).toMatch(/^body\.component_order\[0\]\.upgrade_id: upgrades\/devnet\/public\.yaml: artifact: https:\/\/downloads\.example\.org\/devnet-node-1\.2\.0\.mjs is not under an allowed source \(ARTIFACT_ALLOWED_SOURCES\)/)
    expect(await count()).toBe(3)
    expect(Number(((await db('rollout_groups').count({ n: '*' }).first()) as { n: unknown }).n)).toBe(0)
    const publicAllowed = { ...options, artifactSources: ['https://downloads.example.org/'] }
    expect(await createRollout(db, auto('public'), publicAllowed)).toMatchObject({ status: 'pending', upgrade_id: 'public', target_binary_url: 'https://downloads.example.org/devnet-node-1.2.0.mjs' })
    await db('rollouts').where({ upgrade_id: 'public' }).update({ status: 'cancelled' })

    const allowed = { ...options, artifactSources: [`${pathToFileURL(allowedDir).href}/`] }
    expect(await refusal(createRollout(db, auto('allowed'), options))).toBeInstanceOf(ValidationError)
    expect(await createRollout(db, auto('allowed'), allowed)).toMatchObject({ status: 'pending', upgrade_id: 'allowed' })
    await db('rollouts').where({ upgrade_id: 'allowed' }).update({ status: 'cancelled' })
    expect(await createRolloutGroup(db, group('allowed'), allowed)).toMatchObject({ status: 'pending' })
  })
})
