/**
 * Rollouts naming a stored artifact by binary, version and digest (src/artifacts/resolve.ts,
 * src/rollouts/create.ts), on both databases: through the api-server daemon configured from its
 * environment (NODEPLANE_DATA_DIR, ARTIFACT_RELEASE_PUBLIC_KEYS) and through createRollout /
 * createRolloutGroup with manifests that carry no URL. An unknown artifact, another digest, an
 * unsigned one, one signed by a key the server does not trust, a row whose signature was
 * tampered with, and one whose bytes are gone are refused with 400 and nothing is written; a
 * signed one is accepted and its agents are sent the store's URL. Then a real devnet node whose
 * agent requires signed artifacts is upgraded to a stored, signed devnet-node 1.1.0 served by the
 * agent-gateway, and refuses one signed by another key and an unsigned one.
 */
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { startApiServer } from '../../../daemons/api-server.js'
import { localBlobStore, type LocalBlobStore } from '../../../src/artifacts/blob-store.js'
import { addArtifact, removeArtifact } from '../../../src/artifacts/service.js'
import { generateReleaseKey, parsePublicKey, signArtifact, type ReleaseKeyPair } from '../../../src/artifacts/signing.js'
import { storedArtifactUrl } from '../../../src/artifacts/stored-url.js'
import { loadChainCatalogue } from '../../../src/config/chains.js'
import { apiServerEnv, loadConfig } from '../../../src/config/env.js'
import type { Db } from '../../../src/db/knex.js'
import { ValidationError } from '../../../src/errors.js'
import { createLogger } from '../../../src/log.js'
import { signalRollout, startRollout } from '../../../src/rollouts/control.js'
import { createRollout, createRolloutGroup, type CreateOptions } from '../../../src/rollouts/create.js'
import { listRolloutNodes } from '../../../src/rollouts/store.js'
import { findNode } from '../../../src/nodes/node-store.js'
import { describeEachDialectConcurrently } from '../../helpers/db.js'
import { tempDir } from '../../helpers/cli.js'
import { waitFor } from '../../helpers/ports.js'
import { newKey, newUser } from '../auth/api-harness.js'
import { getJson, LogCapture, Resources } from '../http/harness.js'
import { binaryVersions, devnetRollout, reportedVersions, startFleet, untilStatus } from '../rollouts/harness.js'
import { T0 } from '../rollouts/helpers.js'
import { withSignedDevnetReleases } from './signed-catalogue.js'

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')
const RELEASE_110 = path.join(repoRoot, 'chains/devnet/releases/devnet-node-1.1.0.mjs')

describeEachDialectConcurrently('rollouts from the artifact store on %s', (dialect) => {
  const resources = new Resources()
  const dataDir = tempDir()
  let db: Db
  let blobs: LocalBlobStore
  let trusted: ReleaseKeyPair
  let other: ReleaseKeyPair
  const digest: Record<string, string> = {}
  beforeAll(async () => {
    db = (await resources.database(dialect)).db
    blobs = localBlobStore(dataDir)
    trusted = generateReleaseKey()
    other = generateReleaseKey()
    const dir = tempDir()
    const add = async (version: string, signing: Parameters<typeof addArtifact>[2]['signing']) => {
      // Each version its own bytes (a comment line), so digests tell them apart.
      const file = path.join(dir, `devnet-node-${version}.mjs`)
      fs.writeFileSync(file, `${fs.readFileSync(RELEASE_110, 'utf8')}\n// ${version}\n`)
      digest[version] = `sha256:${(await addArtifact(db, blobs, { file, binaryName: 'devnet-node', version, signing, now: T0 })).sha256}`
    }
    await add('1.2.0', { kind: 'key', key: trusted })
    await add('1.2.1', { kind: 'key', key: other })
    await add('1.2.2', { kind: 'unsigned' })
    await add('1.2.3', { kind: 'key', key: trusted })
    await add('1.2.4', { kind: 'key', key: trusted })
    // 1.2.3's row claims the trusted key but carries a signature by the other one over it.
    const record = (await db('artifacts').where({ version: '1.2.3' }).first()) as { sha256: string; size_bytes: number | string }
    await db('artifacts')
      .where({ version: '1.2.3' })
      .update({ signature: signArtifact({ binary_name: 'devnet-node', version: '1.2.3', sha256: record.sha256, size_bytes: Number(record.size_bytes) }, other.secretKey) })
    // 1.2.4's bytes are gone from the store.
    await blobs.remove(digest['1.2.4']!.slice('sha256:'.length))
    fs.rmSync(dir, { recursive: true, force: true })
  })
  afterAll(async () => {
    await resources.cleanup()
    fs.rmSync(dataDir, { recursive: true, force: true })
  })

  /** What agents are sent for a stored artifact: the gateway serves it (FetchArtifact). */
  const stored = (version: string) => storedArtifactUrl({ binary_name: 'devnet-node', version, sha256: digest[version]!.slice('sha256:'.length) })
  const MANUAL = { chain_profile_id: 'devnet', node_type: 'full', source_version: '1.0.0', binary_name: 'devnet-node' }
  const count = async () => Number(((await db('rollouts').count({ n: '*' }).first()) as { n: unknown }).n)

  it('the api-server refuses unknown, other-digest, unsigned, differently signed, tampered and missing artifacts (400), and accepts a signed one', async () => {
    const config = loadConfig(apiServerEnv, { NODEPLANE_DATA_DIR: dataDir, ARTIFACT_RELEASE_PUBLIC_KEYS: trusted.public_key })
    const logs = new LogCapture()
    const server = await startApiServer({ ...config, API_SERVER_PORT: 0, HTTP_HOST: '127.0.0.1' }, { db, bus: resources.localBus(), logger: createLogger({ destination: logs, level: 'debug' }) })
    resources.add(() => server.stop())
    const admin = await newUser(db, { admin: true })
    const key = (await newKey(db, admin.id, { scopes: ['*', 'admin'], admin: true })).key
    const post = (body: unknown) => getJson(`${server.url}/api/v1/rollouts`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) })

    const refused: [string, string, string][] = [
      ['1.9.9', digest['1.2.0']!, 'artifact not found: no devnet-node 1.9.9 in the artifact store'],
      ['1.2.0', digest['1.2.1']!, 'checksum mismatch: the stored devnet-node 1.2.0 has other bytes than the checksum given'],
      ['1.2.2', digest['1.2.2']!, 'devnet-node 1.2.2 is unsigned in the artifact store'],
      ['1.2.1', digest['1.2.1']!, `signature mismatch: devnet-node 1.2.1 is not signed by a release key this server trusts (key ${other.key_id}; trusted: ${trusted.key_id})`],
      ['1.2.3', digest['1.2.3']!, `signature mismatch: devnet-node 1.2.3 is not signed by a release key this server trusts (key ${trusted.key_id}`],
      ['1.2.4', digest['1.2.4']!, 'artifact not found: the bytes of devnet-node 1.2.4 are missing from the artifact store'],
    ]
    for (const [version, checksum, expected] of refused) {
      const res = await post({ ...MANUAL, target_version: version, target_binary_checksum: checksum })
      expect(res.status, version).toBe(400)
      expect(res.body, version).toEqual({ error: 'invalid request', details: expect.stringContaining(`body.target_binary_checksum: ${expected}`) })
    }
    expect(await count()).toBe(0)

    const created = await post({ ...MANUAL, target_version: '1.2.0', target_binary_checksum: digest['1.2.0'] })
    expect(created.status, JSON.stringify(created.body)).toBe(201)
    expect(created.body).toMatchObject({ target_version: '1.2.0', target_binary_checksum: digest['1.2.0'], target_binary_url: stored('1.2.0') })
    // The pending rollout needs its artifact: removing it is a conflict, and the bytes stay.
    const id = (created.body as { id: string }).id
    await expect(removeArtifact(db, blobs, 'devnet-node', '1.2.0')).rejects.toThrow(`devnet-node 1.2.0 is in use: rollout ${id} (pending) installs it`)
    expect(await blobs.has(digest['1.2.0']!.slice(7))).toBe(true)
    await db('rollouts').update({ status: 'cancelled' })
  })

  it('manifests without an artifact URL name the stored artifact, for rollouts and groups; without the store they are refused', async () => {
    const catalogue = await loadChainCatalogue(repoRoot)
    const configDir = tempDir()
    fs.mkdirSync(path.join(configDir, 'upgrades', 'devnet'), { recursive: true })
    const shipped = fs.readFileSync(path.join(repoRoot, 'upgrades/devnet/devnet-1.1.0.yaml'), 'utf8')
    const manifest = (version: string) =>
      shipped.replace(/^artifact: .*\n/m, '').replace(/^checksum: .*$/m, `checksum: ${digest[version]}`).replace(/^target_version: .*$/m, `target_version: "${version}"`)
    fs.writeFileSync(path.join(configDir, 'upgrades/devnet/signed.yaml'), manifest('1.2.0'))
    fs.writeFileSync(path.join(configDir, 'upgrades/devnet/other-key.yaml'), manifest('1.2.1'))
    const options: CreateOptions = { createdBy: '00000000-0000-4000-8000-0000000000aa', catalogue, now: T0, configDir, artifactStore: { blobs, releaseKeys: [parsePublicKey(trusted.public_key)!] } }
    const auto = (upgradeId: string) => ({ upgrade_id: upgradeId, chain_profile_id: 'devnet', node_type: 'full', source_version: '1.0.0' })
    const group = (upgradeId: string, version: string) => ({ chain_profile_id: 'devnet', node_type: 'full', failure_policy: 'manual', component_order: [{ upgrade_id: upgradeId, binary_name: 'devnet-node', node_type: 'full', version }] })
    const refusal = (promise: Promise<unknown>) => promise.then(() => undefined, (err: unknown) => err as ValidationError)

    const before = await count()
    expect((await refusal(createRollout(db, auto('other-key'), options)))?.details).toContain('upgrades/devnet/other-key.yaml: artifact: signature mismatch: devnet-node 1.2.1')
    expect((await refusal(createRolloutGroup(db, group('other-key', '1.2.1'), options)))?.details).toContain('body.component_order[0].upgrade_id: upgrades/devnet/signed.yaml'.replace('signed', 'other-key'))
    const { artifactStore: _none, ...withoutStore } = options
    expect((await refusal(createRollout(db, auto('signed'), withoutStore)))?.details).toContain('artifact not found: this server has no artifact store configured')
    expect(await count()).toBe(before)

    const rollout = await createRollout(db, auto('signed'), options)
    expect(rollout).toMatchObject({ upgrade_id: 'signed', target_version: '1.2.0', target_binary_checksum: digest['1.2.0'], target_binary_url: stored('1.2.0') })
    await db('rollouts').where({ id: rollout.id }).update({ status: 'cancelled' })
    const created = await createRolloutGroup(db, group('signed', '1.2.0'), options)
    expect(created.component_order[0]).toMatchObject({ version: '1.2.0', url: stored('1.2.0'), checksum: digest['1.2.0'] })
    await expect(removeArtifact(db, blobs, 'devnet-node', '1.2.0')).rejects.toThrow(`devnet-node 1.2.0 is in use: rollout group ${created.id} will install it`)
    await db('rollout_groups').where({ id: created.id }).update({ status: 'cancelled' })
  })

  it('a real devnet node whose agent requires signed artifacts gets a stored, signed 1.1.0 from the gateway; one signed by another key or unsigned is refused at creation and again by its agent, which rolls back', { timeout: 240_000 }, async () => {
    const t = await resources.database(dialect)
    await addArtifact(t.db, blobs, { file: RELEASE_110, binaryName: 'devnet-node', version: '1.1.0', signing: { kind: 'key', key: trusted }, now: new Date() })
    // The hosts' agents trust the release key, and so (unset AGENT_REQUIRE_SIGNED_ARTIFACTS)
    // require signatures: the profile's 1.0.0 they are provisioned with is signed too.
    const fleet = await startFleet(t.db, 1, { agentEnv: { ARTIFACT_RELEASE_PUBLIC_KEYS: trusted.public_key }, artifacts: blobs, catalogue: withSignedDevnetReleases(trusted) })
    resources.add(() => fleet.stop())
    const catalogue = fleet.setting.deps.chains.current()
    const options = () => ({ createdBy: fleet.operatorId, catalogue, now: new Date(), artifactStore: { blobs, releaseKeys: [parsePublicKey(trusted.public_key)!] } })
    const checksum = `sha256:${(await t.db('artifacts').where({ version: '1.1.0' }).first('sha256')).sha256 as string}`
    const rollout = await createRollout(t.db, { ...MANUAL, target_version: '1.1.0', target_binary_checksum: checksum, health_wait_duration: '1s' }, options())
    // No place on any host: the agent asks its gateway for devnet-node 1.1.0 with that digest.
    expect(rollout.target_binary_url).toBe(storedArtifactUrl({ binary_name: 'devnet-node', version: '1.1.0', sha256: checksum.slice(7) }))
    await startRollout(t.db, rollout.id, { by: fleet.operatorId })
    expect(await untilStatus(t.db, rollout.id, ['completed', 'failed', 'paused'])).toMatchObject({ status: 'completed', succeeded_nodes: 1 })
    expect(await binaryVersions(t.db, fleet.nodes)).toEqual(['1.1.0'])
    await waitFor(async () => (await reportedVersions(t.db, fleet.nodes))[0] === '1.1.0', 'the agent to report 1.1.0', 30_000, 200)
    // The node runs it: a later rollback to 1.1.0 would fetch it again, so it stays.
    await expect(removeArtifact(t.db, blobs, 'devnet-node', '1.1.0')).rejects.toThrow('devnet-node 1.1.0 is in use: 1 node(s) run 1.1.0, installed from it')

    // 1.1.1 signed by another key, 1.1.2 unsigned: creation refuses both...
    const dir = tempDir()
    const build = async (version: string, signing: Parameters<typeof addArtifact>[2]['signing']) => {
      const file = path.join(dir, `devnet-node-${version}.mjs`)
      fs.writeFileSync(file, `${fs.readFileSync(RELEASE_110, 'utf8')}\n// ${version}\n`)
      return addArtifact(t.db, blobs, { file, binaryName: 'devnet-node', version, signing, now: new Date() })
    }
    const forged = await build('1.1.1', { kind: 'key', key: other })
    const unsigned = await build('1.1.2', { kind: 'unsigned' })
    fs.rmSync(dir, { recursive: true, force: true })
    const refusal = (version: string, sha256: string) =>
      createRollout(t.db, { ...MANUAL, source_version: '1.1.0', target_version: version, target_binary_checksum: `sha256:${sha256}` }, options()).then(
        () => undefined,
        (err: unknown) => err as ValidationError,
      )
    expect((await refusal('1.1.1', forged.sha256))?.details).toContain('body.target_binary_checksum: signature mismatch: devnet-node 1.1.1 is not signed by a release key this server trusts')
    expect((await refusal('1.1.2', unsigned.sha256))?.details).toContain('body.target_binary_checksum: devnet-node 1.1.2 is unsigned in the artifact store')

    // ...and rollouts that got past it anyway (written straight into the database, as by a
    // server configured with the other key) are refused by the agent: each fails at
    // VerifyArtifact, the node rolls back and stays on 1.1.0, and nothing names a digest.
    for (const [artifact, reason] of [
      [forged, 'VerifyArtifact (artifact signature mismatch)'],
      [unsigned, 'VerifyArtifact (artifact unsigned: devnet-node 1.1.2 has no release signature and this agent requires one (AGENT_REQUIRE_SIGNED_ARTIFACTS))'],
    ] as const) {
      // Only healthy nodes on the source version are upgraded: after an upgrade or a rollback the node first syncs.
      await waitFor(async () => (await findNode(t.db, fleet.nodes[0] as string))?.state === 'healthy', 'the node to be healthy on 1.1.0', 60_000, 100)
      const bypass = await devnetRollout(t.db, fleet, {
        source_version: '1.1.0',
        target_version: artifact.version,
        target_binary_url: storedArtifactUrl(artifact),
        target_binary_checksum: `sha256:${artifact.sha256}`,
        health_wait_duration_ms: 1_000,
      })
      await startRollout(t.db, bypass.id, { by: fleet.operatorId })
      const ended = await untilStatus(t.db, bypass.id, ['completed', 'failed', 'paused'])
      expect(ended.total_nodes, JSON.stringify(ended)).toBe(1)
      const [node] = await listRolloutNodes(t.db, bypass.id)
      expect(node).toMatchObject({ status: 'failed', upgrade_phase: 'rolled_back' })
      expect(node?.error_message).toContain(reason)
      expect(node?.error_message).not.toMatch(/[0-9a-f]{64}/)
      expect(await binaryVersions(t.db, fleet.nodes)).toEqual(['1.1.0'])
      // Over its failure threshold the rollout pauses: cancelled, it frees the chain for the next one.
      if (ended.status === 'paused') {
        await signalRollout(t.db, bypass.id, 'cancel', { by: fleet.operatorId })
        await untilStatus(t.db, bypass.id, ['cancelled'])
      }
    }
  })
})
