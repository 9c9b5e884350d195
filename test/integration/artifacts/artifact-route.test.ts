/**
 * GET /api/v1/artifacts/{binary_name}/{version} on the api-server daemon (src/http/routes/artifacts.ts),
 * on both databases, crossed with the kinds of caller: none (401), a key without the admin scope
 * (403; `*` does not grant it), an admin (200, the view `artifact show` prints). An unknown release
 * is 404 "artifact not found" and a malformed name 400 naming the parameter.
 */
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { startApiServer } from '../../../daemons/api-server.js'
import { localBlobStore } from '../../../src/artifacts/blob-store.js'
import { addArtifact, toArtifactView, type ArtifactView } from '../../../src/artifacts/service.js'
import { generateReleaseKey } from '../../../src/artifacts/signing.js'
import { apiServerEnv, loadConfig } from '../../../src/config/env.js'
import type { Db } from '../../../src/db/knex.js'
import { createLogger } from '../../../src/log.js'
import { describeEachDialectConcurrently } from '../../helpers/db.js'
import { tempDir } from '../../helpers/cli.js'
import { newKey, newUser } from '../auth/api-harness.js'
import { getJson, Resources } from '../http/harness.js'

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')
const RELEASE_110 = path.join(repoRoot, 'chains/devnet/releases/devnet-node-1.1.0.mjs')

describeEachDialectConcurrently('the artifact route on %s', (dialect) => {
  const resources = new Resources()
  const dataDir = tempDir()
  let db: Db
  let url: string
  let stored: ArtifactView
  beforeAll(async () => {
    db = (await resources.database(dialect)).db
    const key = generateReleaseKey()
    stored = toArtifactView(await addArtifact(db, localBlobStore(dataDir), { file: RELEASE_110, binaryName: 'devnet-node', version: '1.1.0', signing: { kind: 'key', key }, now: new Date() }))
    const config = loadConfig(apiServerEnv, { NODEPLANE_DATA_DIR: dataDir, ARTIFACT_RELEASE_PUBLIC_KEYS: key.public_key })
    const server = await startApiServer({ ...config, API_SERVER_PORT: 0, HTTP_HOST: '127.0.0.1' }, { db, bus: resources.localBus(), logger: createLogger({ level: 'silent' }) })
    resources.add(() => server.stop())
    url = server.url
  })
  afterAll(async () => {
    await resources.cleanup()
    fs.rmSync(dataDir, { recursive: true, force: true })
  })

  const get = (p: string, key?: string) => getJson(`${url}/api/v1/artifacts/${p}`, key ? { headers: { authorization: `Bearer ${key}` } } : {})

  it('answers an admin with the stored artifact; no credentials 401, a key without admin 403', async () => {
    const admin = await newUser(db, { admin: true })
    const adminKey = (await newKey(db, admin.id, { scopes: ['*', 'admin'], admin: true })).key
    const userKey = (await newKey(db, (await newUser(db)).id, { scopes: ['*'] })).key
    const [ok, none, wrongScope] = await Promise.all([get('devnet-node/1.1.0', adminKey), get('devnet-node/1.1.0'), get('devnet-node/1.1.0', userKey)])
    expect(ok.status).toBe(200)
    expect(ok.body).toEqual(stored)
    expect(none.status).toBe(401)
    expect(wrongScope.status).toBe(403)
    expect(JSON.stringify([none.body, wrongScope.body])).not.toContain(stored.sha256)
  })

  it('answers 404 "artifact not found" for an unknown release and 400 for a malformed name', async () => {
    const admin = await newUser(db, { admin: true })
    const adminKey = (await newKey(db, admin.id, { scopes: ['*', 'admin'], admin: true })).key
    const [unknownVersion, unknownBinary, malformed] = await Promise.all([get('devnet-node/9.9.9', adminKey), get('anvil/1.1.0', adminKey), get('devnet-node/.hidden', adminKey)])
    expect(unknownVersion.status).toBe(404)
    expect(unknownVersion.body).toEqual({ error: 'artifact not found', details: 'no devnet-node 9.9.9 in the artifact store (nodeplane artifact list)' })
    expect(unknownBinary.status).toBe(404)
    expect(malformed.status).toBe(400)
    expect((malformed.body as { details: string }).details).toContain('params.version')
  })
})
