/**
 * FetchArtifact on a real agent-gateway over TLS (src/artifacts/gateway-fetch.ts) with the agent's
 * own fetcher (src/node-agent/artifact-fetch.ts), on both databases: an agent with its node token gets
 * a stored artifact's bytes (several chunks); no token, a wrong one, another node's, a revoked
 * one are UNAUTHENTICATED and a terminated node's FAILED_PRECONDITION; anything not stored with
 * exactly that binary, version and digest is the same NOT_FOUND "artifact not found". Then the
 * agent's install path: a stored artifact signed by a trusted key installs from the gateway, one
 * signed by another key, an unsigned one (when signatures are required) and an unknown one are
 * refused, and neither the errors nor the agent's log carry a digest.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import * as grpc from '@grpc/grpc-js'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { gatewayArtifactFetcher } from '../../../src/node-agent/artifact-fetch.js'
import { ensureInstalled } from '../../../src/node-agent/artifacts.js'
import { openStateDir, releaseBinaryPath } from '../../../src/node-agent/state-dir.js'
import { agentGatewayService } from '../../../src/agent-gateway/grpc.js'
import { createAgentToken, revokeAgentToken } from '../../../src/agent-gateway/tokens.js'
import { localBlobStore, type LocalBlobStore } from '../../../src/artifacts/blob-store.js'
import { addArtifact } from '../../../src/artifacts/service.js'
import { generateReleaseKey, parsePublicKey, type ReleaseKeyPair } from '../../../src/artifacts/signing.js'
import { storedArtifactUrl, type StoredArtifactRef } from '../../../src/artifacts/stored-url.js'
import type { Db } from '../../../src/db/knex.js'
import { createLogger } from '../../../src/log.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { insertTestNode, setNodeState } from '../../helpers/fixtures.js'
import { tempDir } from '../../helpers/cli.js'
import { LogCapture } from '../http/harness.js'
import { devTls, startGateway, type RunningGateway } from '../agent-gateway/harness.js'

describe.each(DIALECTS)('FetchArtifact on the agent-gateway on %s', (dialect) => {
  let t: TestDatabase
  let db: Db
  let dir: string
  let blobs: LocalBlobStore
  let gateway: RunningGateway
  let storeless: RunningGateway
  let trusted: ReleaseKeyPair
  let other: ReleaseKeyPair
  const bytes: Record<string, Buffer> = {}
  const ref: Record<string, StoredArtifactRef> = {}

  beforeAll(async () => {
    t = await createTestDatabase(dialect)
    db = t.db
    dir = tempDir()
    blobs = localBlobStore(path.join(dir, 'data'))
    trusted = generateReleaseKey()
    other = generateReleaseKey()
    const add = async (version: string, signing: Parameters<typeof addArtifact>[2]['signing']) => {
      // Larger than one chunk (64 KiB), so the stream's order and completeness count.
      bytes[version] = Buffer.concat([Buffer.from(`#!/usr/bin/env node\n// devnet-node ${version}\n`), crypto.randomBytes(300_000)])
      const file = path.join(dir, `devnet-node-${version}`)
      fs.writeFileSync(file, bytes[version]!)
      const record = await addArtifact(db, blobs, { file, binaryName: 'devnet-node', version, signing, now: new Date() })
      ref[version] = { binary_name: 'devnet-node', version, sha256: record.sha256 }
    }
    await add('1.2.0', { kind: 'key', key: trusted })
    await add('1.2.1', { kind: 'key', key: other })
    await add('1.2.2', { kind: 'unsigned' })
    await add('1.2.3', { kind: 'key', key: trusted })
    await blobs.remove(ref['1.2.3']!.sha256)
    gateway = await startGateway(db, { artifacts: blobs })
    storeless = await startGateway(db)
  })
  afterAll(async () => {
    await gateway?.stop()
    await storeless?.stop()
    await t.destroy()
    fs.rmSync(dir, { recursive: true, force: true })
  })

  async function nodeWithToken(): Promise<{ nodeId: string; token: string }> {
    const node = await insertTestNode(db)
    return { nodeId: node.id, token: await createAgentToken(db, node.id) }
  }

  function fetcher(agent: { nodeId: string; token: string }, target = gateway.target) {
    return gatewayArtifactFetcher({ target, ca: devTls().ca, nodeId: agent.nodeId, token: agent.token })
  }

  /** The status a fetch ends with, and whether it wrote anything. */
  async function refusal(fetch: Promise<void>, file: string): Promise<{ code: number | undefined; details: string | undefined; wrote: number }> {
    const err = await fetch.then(
      () => undefined,
      (e: unknown) => e as Partial<grpc.StatusObject>,
    )
    const wrote = fs.existsSync(file) ? fs.statSync(file).size : 0
    fs.rmSync(file, { force: true })
    return { code: err?.code, details: err?.details, wrote }
  }

  it('an agent with its node token gets the stored bytes, in order and whole', async () => {
    const file = path.join(dir, 'fetched')
    await fetcher(await nodeWithToken()).fetchTo(ref['1.2.0']!, file, AbortSignal.timeout(10_000))
    expect(fs.readFileSync(file).equals(bytes['1.2.0']!)).toBe(true)
    fs.rmSync(file)
  })

  it('refuses a request without a token, with a wrong one, another node\'s, a revoked one, or from a terminated node', async () => {
    const file = path.join(dir, 'refused')
    const agent = await nodeWithToken()
    const neighbour = await nodeWithToken()
    const signal = () => AbortSignal.timeout(10_000)

    // No metadata at all: a bare client.
    const Service = agentGatewayService()
    const bare = new Service(gateway.target, grpc.credentials.createSsl(devTls().ca)) as unknown as grpc.Client & {
      FetchArtifact(request: StoredArtifactRef, metadata: grpc.Metadata): grpc.ClientReadableStream<{ data: Buffer }>
    }
    const received: Buffer[] = []
    const bareErr = await new Promise<Partial<grpc.StatusObject>>((resolve) => {
      const call = bare.FetchArtifact(ref['1.2.0']!, new grpc.Metadata())
      call.on('data', (chunk: { data: Buffer }) => received.push(chunk.data))
      call.on('error', resolve)
      call.on('end', () => resolve({}))
    })
    bare.close()
    expect(bareErr.code).toBe(grpc.status.UNAUTHENTICATED)
    expect(received).toEqual([])

    for (const [what, credentials] of [
      ['a wrong token', { nodeId: agent.nodeId, token: `npt_${'x'.repeat(40)}` }],
      ['an empty token', { nodeId: agent.nodeId, token: '' }],
      ["another node's token", { nodeId: agent.nodeId, token: neighbour.token }],
    ] as const) {
      expect(await refusal(fetcher(credentials).fetchTo(ref['1.2.0']!, file, signal()), file), what).toMatchObject({ code: grpc.status.UNAUTHENTICATED, wrote: 0 })
    }

    await revokeAgentToken(db, neighbour.nodeId)
    expect(await refusal(fetcher(neighbour).fetchTo(ref['1.2.0']!, file, signal()), file)).toMatchObject({ code: grpc.status.UNAUTHENTICATED, wrote: 0 })

    await setNodeState(db, agent.nodeId, 'terminated')
    expect(await refusal(fetcher(agent).fetchTo(ref['1.2.0']!, file, signal()), file)).toMatchObject({ code: grpc.status.FAILED_PRECONDITION, wrote: 0 })
  })

  it('answers the same "artifact not found" for an unknown release, another digest, bytes gone, or a gateway without a store', async () => {
    const file = path.join(dir, 'missing')
    const agent = await nodeWithToken()
    const notFound = { code: grpc.status.NOT_FOUND, details: 'artifact not found', wrote: 0 }
    const signal = () => AbortSignal.timeout(10_000)
    expect(await refusal(fetcher(agent).fetchTo({ ...ref['1.2.0']!, version: '9.9.9' }, file, signal()), file)).toEqual(notFound)
    expect(await refusal(fetcher(agent).fetchTo({ ...ref['1.2.0']!, sha256: ref['1.2.1']!.sha256 }, file, signal()), file)).toEqual(notFound)
    expect(await refusal(fetcher(agent).fetchTo({ ...ref['1.2.0']!, sha256: 'ab'.repeat(32) }, file, signal()), file)).toEqual(notFound)
    expect(await refusal(fetcher(agent).fetchTo(ref['1.2.3']!, file, signal()), file)).toEqual(notFound)
    expect(await refusal(fetcher(agent, storeless.target).fetchTo(ref['1.2.0']!, file, signal()), file)).toEqual(notFound)
    // Malformed names are told apart: they are the agent's bug, not a question about the store.
    expect(await refusal(fetcher(agent).fetchTo({ ...ref['1.2.0']!, sha256: 'not-a-digest' }, file, signal()), file)).toMatchObject({ code: grpc.status.INVALID_ARGUMENT, wrote: 0 })
  })

  it('an agent installs a stored artifact from the gateway only when its checksum and signature hold', async () => {
    const agent = await nodeWithToken()
    const stateDir = openStateDir(path.join(dir, `agent-${agent.nodeId}`))
    const logs = new LogCapture()
    const logger = createLogger({ destination: logs, level: 'debug' })
    const options = { logger, stored: fetcher(agent), releaseKeys: [parsePublicKey(trusted.public_key)!], requireSigned: true }
    const artifact = (version: string, signature?: string | null) => ({
      version,
      url: storedArtifactUrl(ref[version]!),
      sha256: ref[version]!.sha256,
      ...(signature ? { signature } : {}),
    })
    const signatureOf = async (version: string) => ((await db('artifacts').where({ version }).first('signature')) as { signature: string | null }).signature

    expect(await ensureInstalled(stateDir, 'devnet-node', artifact('1.2.0', await signatureOf('1.2.0')), options)).toBe(true)
    expect(fs.readFileSync(releaseBinaryPath(stateDir, 'devnet-node', '1.2.0')).equals(bytes['1.2.0']!)).toBe(true)

    await expect(ensureInstalled(stateDir, 'devnet-node', artifact('1.2.1', await signatureOf('1.2.1')), options)).rejects.toThrow(/^artifact signature mismatch$/)
    await expect(ensureInstalled(stateDir, 'devnet-node', artifact('1.2.2'), options)).rejects.toThrow(
      'artifact unsigned: devnet-node 1.2.2 has no release signature and this agent requires one (AGENT_REQUIRE_SIGNED_ARTIFACTS)',
    )
    // The same unsigned one is accepted on its checksum by an agent that does not require signatures.
    expect(await ensureInstalled(stateDir, 'devnet-node', artifact('1.2.2'), { ...options, requireSigned: false })).toBe(true)
    await expect(ensureInstalled(stateDir, 'devnet-node', { ...artifact('1.2.0', await signatureOf('1.2.0')), version: '1.2.9', url: storedArtifactUrl({ ...ref['1.2.0']!, version: '1.2.9' }) }, options)).rejects.toThrow(
      /^artifact not found at the artifact store \(devnet-node 1\.2\.9\)$/,
    )
    for (const version of ['1.2.1', '1.2.9']) expect(fs.existsSync(releaseBinaryPath(stateDir, 'devnet-node', version))).toBe(false)
    expect(logs.text()).not.toMatch(/[0-9a-f]{64}/)
  })
})
