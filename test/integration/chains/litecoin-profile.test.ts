/**
 * The litecoin profile as the catalogue loads and renders it, what `GET /api/v1/chains` (and so
 * `nodeplane chain list`) shows of it, and a chain whose binary is absent: the rest of the
 * catalogue loads, and provisioning such a node fails with what to install.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { commandPayloads } from '../../../src/agent-gateway/protocol.js'
import { createApiRateLimiter } from '../../../src/auth/api-rate-limit.js'
import { authenticatorFromSettings } from '../../../src/auth/authenticator.js'
import { openChainCatalogue, staticChainSource } from '../../../src/config/chain-source.js'
import { defaultConfigDir, getProfile, loadChainCatalogue, renderNodeConfig, type ChainCatalogue } from '../../../src/config/chains.js'
import type { Db } from '../../../src/db/knex.js'
import { ConfigError, ValidationError } from '../../../src/errors.js'
import { controlPlaneRoutes } from '../../../src/http/routes/index.js'
import { createLogger } from '../../../src/log.js'
import { findNode, insertNode } from '../../../src/nodes/node-store.js'
import { requestProvision } from '../../../src/provisioning/index.js'
import type { WorkflowWorker } from '../../../src/workflows/index.js'
import { createTestDatabase, describeEachDialectConcurrently, type TestDatabase } from '../../helpers/db.js'
import { insertSubscription } from '../../helpers/fixtures.js'
import { newKey, newUser } from '../auth/api-harness.js'
import { getJson, LogCapture, Resources } from '../http/harness.js'
import { lifecycleSetting, startLifecycleWorker, untilRunFinished, type LifecycleSetting } from '../provisioning/harness.js'

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')
const LITECOIND = '/usr/lib/litecoin/litecoind'

/** A config dir with devnet and litecoin, litecoin's profile edited by `edit`. */
function configDirWith(edit: (profile: string) => string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-litecoin-profile-'))
  for (const chain of ['devnet', 'litecoin']) fs.cpSync(path.join(repoRoot, 'chains', chain), path.join(dir, 'chains', chain), { recursive: true })
  const file = path.join(dir, 'chains', 'litecoin', 'profile.yaml')
  fs.writeFileSync(file, edit(fs.readFileSync(file, 'utf8')))
  return dir
}

describe('the litecoin profile', () => {
  const dirs: string[] = []
  afterAll(() => {
    for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true })
  })
  const configDir = (edit: (profile: string) => string) => {
    const dir = configDirWith(edit)
    dirs.push(dir)
    return dir
  }

  it('renders offline regtest with RPC on the node port at 127.0.0.1, cookie authentication and no password anywhere', async () => {
    const profile = getProfile(await loadChainCatalogue(defaultConfigDir()), 'litecoin')
    expect(profile.releases).toEqual([
      { version: '0.21.2.1', url: `file://${LITECOIND}`, sha256: '3725d2a516809427b6ffd88a560186983dd96991fb98acbf8e0f1f7b09a866ab', package: 'litecoind' },
    ])
    for (const [nodeType, txindex] of [
      ['full', '0'],
      ['archive', '1'],
    ] as const) {
      const config = renderNodeConfig(profile, nodeType, { rpc_port: 18443, node_id: '00000000-0000-4000-8000-000000000001' })
      expect(config).toMatchObject({ binary_name: 'litecoind', artifact: { version: '0.21.2.1', url: `file://${LITECOIND}` }, run: { runtime: 'native', args: ['-conf={config_dir}/litecoin.conf', '-datadir={data_dir}'] } })
      const conf = config.files.find((f) => f.path === 'config/litecoin.conf')?.content ?? ''
      const [global = '', regtest = ''] = conf.split('[regtest]')
      expect(global).toMatch(/^regtest=1$/m)
      expect(global).toMatch(new RegExp(`^txindex=${txindex}$`, 'm'))
      for (const line of ['listen=0', 'connect=0', 'dnsseed=0', 'rpcbind=127.0.0.1', 'rpcallowip=127.0.0.1', 'rpcport=18443']) expect(regtest).toMatch(new RegExp(`^${line}$`, 'm'))
      expect(conf).not.toMatch(/rpcpassword|rpcuser|rpcauth/)
      expect(config.probe).toEqual({
        type: 'bitcoin_rpc',
        url: 'http://127.0.0.1:18443',
        cookie_file: 'data/regtest/.cookie',
        sync_policy: { max_header_lag: 0, initial_block_download: 'ignore', min_connections: 0 },
        timeout_ms: 5000,
        startup_grace_ms: 60000,
      })
    }
    expect(profile.inputs).toEqual([
      { name: 'wallet_seed', type: 'secret', required: false, phase: 'pre_provision', source: 'chain_generated', path: 'data/wallet-seed.wif', export: { type: 'bitcoin_wallet_hd_seed', wallet: 'nodeplane' } },
    ])
  })

  it('litecoind not installed, or another build: the release is unavailable, the catalogue still loads, rendering says what to install', async () => {
    const absent = await loadChainCatalogue(configDir((p) => p.replace(`file://${LITECOIND}`, 'file:///nonexistent/litecoin/litecoind')))
    expect([...absent.profiles.keys()]).toEqual(['devnet', 'litecoin'])
    const release = getProfile(absent, 'litecoin').releases[0]
    expect(release?.unavailable).toBe('/nonexistent/litecoin/litecoind is not installed (Debian package litecoind: apt-get install litecoind)')
    const refused = (() => {
      try {
        return renderNodeConfig(getProfile(absent, 'litecoin'), 'full', { rpc_port: 18443, node_id: 'n' })
      } catch (err) {
        return err
      }
    })()
    expect(refused).toBeInstanceOf(ValidationError)
    expect((refused as Error).message).toBe('chain litecoin release 0.21.2.1 cannot be installed: /nonexistent/litecoin/litecoind is not installed (Debian package litecoind: apt-get install litecoind)')

    const other = path.join(configDir((p) => p), 'other-litecoind')
    dirs.push(other)
    fs.writeFileSync(other, 'not the pinned build')
    const mismatch = await loadChainCatalogue(configDir((p) => p.replace(`file://${LITECOIND}`, `file://${other}`)))
    expect(getProfile(mismatch, 'litecoin').releases[0]?.unavailable).toBe(
      `${other} is not the build this release pins (another version of the Debian package litecoind is installed); install the pinned one or add a release for it`,
    )
    // It carries no digest of the file it found.
    expect(getProfile(mismatch, 'litecoin').releases[0]?.unavailable).not.toMatch(/[0-9a-f]{64}/)

    // A process opening that catalogue says so once, with what to install.
    const logs = new LogCapture()
    const source = await openChainCatalogue({ configDir: configDir((p) => p.replace(`file://${LITECOIND}`, 'file:///nonexistent/litecoin/litecoind')), version: 'latest', checkIntervalMs: 0, logger: createLogger({ destination: logs, level: 'info' }) })
    source.close()
    expect(logs.lines.filter((l) => l.level === 'warn').map((l) => l.msg)).toEqual([
      'chain litecoin release 0.21.2.1 is unavailable: /nonexistent/litecoin/litecoind is not installed (Debian package litecoind: apt-get install litecoind)',
    ])

    // Without `package`, a missing artifact is still a broken catalogue.
    const broken = await loadChainCatalogue(configDir((p) => p.replace(`file://${LITECOIND}`, 'file:///nonexistent/litecoind').replace(/^ {4}package: litecoind\n/m, ''))).catch((err: unknown) => err)
    expect(broken).toBeInstanceOf(ConfigError)
    expect((broken as ConfigError).problems).toEqual(['chains/litecoin/profile.yaml: releases[0].artifact: cannot read /nonexistent/litecoind: ENOENT'])
  })

  it('refuses a misplaced export or package, naming the field', async () => {
    const exportOnGenerated = await loadChainCatalogue(
      configDir((p) => p.replace('    source: chain_generated\n    path: data/wallet-seed.wif\n', '    source: generated\n    key_type: ed25519\n')),
    ).catch((err: unknown) => err)
    expect((exportOnGenerated as ConfigError).problems).toEqual(['chains/litecoin/profile.yaml: inputs[0].export: only chain_generated secrets are exported by the chain'])
    const badWallet = await loadChainCatalogue(configDir((p) => p.replace('wallet: nodeplane', 'wallet: ../other'))).catch((err: unknown) => err)
    expect((badWallet as ConfigError).problems[0]).toMatch(/inputs\[0\]\.export\.wallet: must be 1 to 64 letters/)
    // The agent's side of the same rules: a key restored into the chain is a state key, an export's path is the chain's.
    const sealed = { ephemeral_public_key: 'a', nonce: 'b', ciphertext: 'c' }
    const restoreUnderKeys = commandPayloads.inject_keys.safeParse({ keys: [{ path: 'seed', sealed, restore: { type: 'bitcoin_wallet_hd_seed', wallet: 'nodeplane' } }] })
    expect(restoreUnderKeys.success ? [] : restoreUnderKeys.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`)).toEqual(['keys.0.restore: only a state key is restored into the chain'])
    const exportOutside = commandPayloads.capture_keys.safeParse({ paths: ['agent-key'], recipient_public_key: 'k', exports: [{ type: 'bitcoin_wallet_hd_seed', path: 'agent-key', wallet: 'nodeplane' }] })
    expect(exportOutside.success ? [] : exportOutside.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`)).toEqual(['exports.0.path: must be a file under data/ or config/'])

    const packagedRelative = await loadChainCatalogue(configDir((p) => p.replace(`file://${LITECOIND}`, 'releases/litecoind'))).catch((err: unknown) => err)
    expect((packagedRelative as ConfigError).problems).toEqual([
      'chains/litecoin/profile.yaml: releases[0].package: only an artifact outside the catalogue (an absolute file:// URL) is installed by a package',
    ])
  })
})

describeEachDialectConcurrently('the litecoin chain in the API and provisioning on %s', (dialect) => {
  const resources = new Resources()
  let t: TestDatabase
  let db: Db
  let setting: LifecycleSetting
  let worker: WorkflowWorker
  let absentDir: string

  beforeAll(async () => {
    t = await createTestDatabase(dialect)
    db = t.db
    absentDir = configDirWith((p) => p.replace(`file://${LITECOIND}`, 'file:///nonexistent/litecoin/litecoind'))
    setting = await lifecycleSetting(db)
    // The catalogue of a control plane on a machine without litecoind.
    const absent: ChainCatalogue = await loadChainCatalogue(absentDir)
    setting.deps = { ...setting.deps, chains: staticChainSource(absent) }
    worker = startLifecycleWorker(db, setting.deps)
  }, 60_000)
  afterAll(async () => {
    await worker?.stop()
    for (const host of fs.existsSync(setting?.root ?? '') ? fs.readdirSync(setting.root) : []) await setting.provider.destroyHost(host)
    await setting?.gateway.stop()
    await resources.cleanup()
    await t?.destroy()
    fs.rmSync(absentDir, { recursive: true, force: true })
  })

  it('GET /api/v1/chains (what chain list shows) offers litecoin with its chain-generated wallet key, and nothing internal', async () => {
    const { authenticate } = authenticatorFromSettings(
      { AUTH_PROVIDER: 'idp', AUTH_IDP_AUTHORIZED_PARTY: [], AUTH_CLOCK_SKEW: 30_000, AUTH_LEGACY_JWKS_URL: 'http://127.0.0.1:9/.well-known/jwks.json' },
      { db },
    )
    const chains = staticChainSource(await loadChainCatalogue(defaultConfigDir()))
    const api = await resources.api({ db, authenticate, rateLimit: createApiRateLimiter({ perMinute: 10_000 }).rateLimit, routes: controlPlaneRoutes({ db, chains }) })
    const user = await newUser(db)
    const key = (await newKey(db, user.id, { scopes: ['chains:read'] })).key
    const res = await getJson(`${api.url}/api/v1/chains`, { headers: { authorization: `Bearer ${key}` } })
    expect(res.status).toBe(200)
    const litecoin = (res.body as { chains: { id: string }[] }).chains.find((c) => c.id === 'litecoin')
    expect(litecoin).toEqual({
      id: 'litecoin',
      name: 'Litecoin (Litecoin Core, regtest)',
      description: expect.stringContaining('litecoind'),
      node_types: ['full', 'archive'],
      durations: ['1w', '2w', '1m', '3m', '6m'],
      default_version: '0.21.2.1',
      versions: ['0.21.2.1'],
      // Unavailable on a host without Debian's litecoind (or with another build of it).
      unavailable_versions: getProfile(chains.current(), 'litecoin').releases[0]?.unavailable === undefined ? [] : ['0.21.2.1'],
      inputs: [{ name: 'wallet_seed', type: 'secret', required: false, phase: 'pre_provision', source: 'chain_generated', key_type: null }],
    })
    expect(JSON.stringify(litecoin)).not.toMatch(/file:\/\/|litecoin\/litecoind|sha256|bitcoin_wallet_hd_seed|cookie/)
  })

  it('provisioning a litecoin node where litecoind is not installed fails with what to install, leaving no host', { timeout: 60_000 }, async () => {
    const user = await newUser(db)
    const subscriptionId = await insertSubscription(db, user.id)
    await db('subscriptions').where({ id: subscriptionId }).update({ chain_profile_id: 'litecoin' })
    const node = await insertNode(db, { subscription_id: subscriptionId, chain_profile_id: 'litecoin', node_type: 'full' })
    const run = await untilRunFinished(db, (await requestProvision(db, node.id)).run.id, 50_000)
    expect(run.status).toBe('failed')
    const reason = 'chain litecoin release 0.21.2.1 cannot be installed: /nonexistent/litecoin/litecoind is not installed (Debian package litecoind: apt-get install litecoind)'
    expect(run.error).toBe(`step configure#0 failed after 3 attempt(s): ${reason}`)
    const failed = await findNode(db, node.id)
    expect(failed?.state).toBe('failed')
    expect(fs.readdirSync(setting.root)).toEqual([])
  })
})
