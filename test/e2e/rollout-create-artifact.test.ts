/**
 * `nodeplane rollout create --artifact BINARY@VERSION` through the built binary against a real
 * `nodeplane daemon api-server` (NATS, the artifact store in its data directory, a release
 * public key), on both databases: the digest is read from the API (GET /api/v1/artifacts/…) and
 * the rollout names the stored artifact, which agents fetch from the gateway; manual mode without
 * --target-url does the same with the digest given. An unknown, unsigned, differently signed or
 * other-digest artifact, a file:// URL, a public URL outside ARTIFACT_ALLOWED_SOURCES and a key
 * without the admin scope are refused with their exit codes, and nothing is created; malformed and conflicting flags are refused before any request.
 */
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { localBlobStore } from '../../src/artifacts/blob-store.js'
import { addArtifact } from '../../src/artifacts/service.js'
import { generateReleaseKey } from '../../src/artifacts/signing.js'
import { storedArtifactUrl } from '../../src/artifacts/stored-url.js'
import type { RolloutView } from '../../src/rollouts/views.js'
import { nodeplane, spawnNodeplane, tempDir, type CliResult } from '../helpers/cli.js'
import { createTestDatabase, describeEachDialectConcurrently, type TestDatabase } from '../helpers/db.js'
import { startNats, type NatsServer } from '../helpers/nats.js'
import { freePort, waitFor } from '../helpers/ports.js'
import { newKey, newUser } from '../integration/auth/api-harness.js'

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const RELEASE_110 = path.join(REPO, 'chains/devnet/releases/devnet-node-1.1.0.mjs')

describeEachDialectConcurrently('rollout create naming a stored artifact on %s', (dialect) => {
  let t: TestDatabase
  let nats: NatsServer
  let server: ReturnType<typeof spawnNodeplane> | undefined
  const dir = tempDir()
  const dataDir = path.join(dir, 'data')
  const digest: Record<string, string> = {}
  let env: Record<string, string>
  let narrowKey: string

  beforeAll(async () => {
    ;[t, nats] = await Promise.all([createTestDatabase(dialect), startNats()])
    const trusted = generateReleaseKey()
    const other = generateReleaseKey()
    const blobs = localBlobStore(dataDir)
    const add = async (version: string, signing: Parameters<typeof addArtifact>[2]['signing']) => {
      const file = path.join(dir, `devnet-node-${version}.mjs`)
      fs.writeFileSync(file, `${fs.readFileSync(RELEASE_110, 'utf8')}\n// ${version}\n`)
      digest[version] = (await addArtifact(t.db, blobs, { file, binaryName: 'devnet-node', version, signing, now: new Date() })).sha256
    }
    await add('1.1.0', { kind: 'key', key: trusted })
    await add('1.1.1', { kind: 'key', key: other })
    await add('1.1.2', { kind: 'unsigned' })
    const port = await freePort()
    server = spawnNodeplane(['daemon', 'api-server'], {
      cwd: dir,
      env: { DATABASE_URL: t.url, NATS_URL: nats.url, API_SERVER_PORT: String(port), HTTP_HOST: '127.0.0.1', NODEPLANE_DATA_DIR: dataDir, ARTIFACT_RELEASE_PUBLIC_KEYS: trusted.public_key },
    })
    const url = `http://127.0.0.1:${port}`
    await waitFor(async () => (await fetch(`${url}/health`).catch(() => undefined))?.ok, 'the api-server to listen', 30_000, 100)
    const admin = await newUser(t.db, { admin: true })
    env = { NODEPLANE_API_URL: url, NODEPLANE_API_KEY: (await newKey(t.db, admin.id, { scopes: ['*', 'admin'], admin: true })).key }
    narrowKey = (await newKey(t.db, (await newUser(t.db)).id, { scopes: ['*'] })).key
  }, 60_000)
  afterAll(async () => {
    server?.kill('SIGTERM')
    if (server) await server.catch(() => undefined)
    await t?.destroy()
    await nats?.destroy()
    fs.rmSync(dir, { recursive: true, force: true })
  })

  const run = (args: string[], extra: Record<string, string> = {}): Promise<CliResult> => nodeplane(args, { cwd: dir, env: { ...env, ...extra } })
  const BASE = ['rollout', 'create', '--chain', 'devnet', '--node-type', 'full', '--source-version', '1.0.0']
  const count = async () => Number(((await t.db('rollouts').count({ n: '*' }).first()) as { n: unknown }).n)
  const cancel = async (id: string) => expect((await run(['rollout', 'cancel', '--id', id, '--yes'])).exitCode).toBe(0)

  it('--artifact reads the digest from the API; manual mode without --target-url names the same stored artifact', { timeout: 60_000 }, async () => {
    const created = await run([...BASE, '--artifact', 'devnet-node@1.1.0', '--json'])
    expect(created.exitCode, created.stderr).toBe(0)
    const rollout = JSON.parse(created.stdout) as RolloutView
    const expected = { binary_name: 'devnet-node', target_version: '1.1.0', target_binary_checksum: `sha256:${digest['1.1.0']}`, target_binary_url: storedArtifactUrl({ binary_name: 'devnet-node', version: '1.1.0', sha256: digest['1.1.0']! }) }
    expect(rollout).toMatchObject({ status: 'pending', ...expected })
    await cancel(rollout.id)

    const manual = await run([...BASE, '--binary-name', 'devnet-node', '--target-version', '1.1.0', '--target-checksum', `sha256:${digest['1.1.0']}`])
    expect(manual.exitCode, manual.stderr).toBe(0)
    const [latest] = (await t.db('rollouts').orderBy('created_at', 'desc').limit(1)) as Array<{ id: string; target_binary_url: string }>
    expect(latest?.target_binary_url).toBe(expected.target_binary_url)
    await cancel(latest!.id)
  })

  it('refuses unknown, unsigned, differently signed and other-digest artifacts, file://, a free public URL and a key without admin, creating nothing', { timeout: 60_000 }, async () => {
    const before = await count()
    const [unknown, unsigned, otherKey, otherDigest, fileUrl, publicUrl, narrow] = await Promise.all([
      run([...BASE, '--artifact', 'devnet-node@9.9.9']),
      run([...BASE, '--artifact', 'devnet-node@1.1.2']),
      run([...BASE, '--artifact', 'devnet-node@1.1.1', '--json']),
      run([...BASE, '--artifact', 'devnet-node@1.1.0', '--target-checksum', `sha256:${digest['1.1.1']}`]),
      run([...BASE, '--binary-name', 'devnet-node', '--target-version', '1.1.0', '--target-url', 'file:///etc/nodeplane/master.key', '--target-checksum', `sha256:${'ab'.repeat(32)}`]),
      // The api-server has no ARTIFACT_ALLOWED_SOURCES: a public host is as free as any other URL.
      run([...BASE, '--binary-name', 'devnet-node', '--target-version', '1.1.0', '--target-url', 'https://releases.example.com/devnet-node-1.1.0.mjs', '--target-checksum', `sha256:${digest['1.1.0']}`]),
      run([...BASE, '--artifact', 'devnet-node@1.1.0'], { NODEPLANE_API_KEY: narrowKey }),
    ])
    expect(unknown.exitCode).toBe(3)
    expect(unknown.stderr).toMatch(/^Error: artifact not found: no devnet-node 9\.9\.9 in the artifact store/)
    expect(unsigned.exitCode).toBe(2)
    expect(unsigned.stderr).toContain('body.target_binary_checksum: devnet-node 1.1.2 is unsigned in the artifact store')
    expect(otherKey.exitCode).toBe(2)
    expect((JSON.parse(otherKey.stdout) as { error: { message: string } }).error.message).toContain('signature mismatch: devnet-node 1.1.1 is not signed by a release key this server trusts')
    expect(otherDigest.exitCode).toBe(2)
    expect(otherDigest.stderr).toContain('checksum mismatch: the stored devnet-node 1.1.0 has other bytes than the checksum given')
    expect(fileUrl.exitCode).toBe(2)
    expect(fileUrl.stderr).toContain('body.target_binary_url: file:///etc/nodeplane/master.key is a file on the node hosts (file://)')
    expect(publicUrl.exitCode).toBe(2)
    // One line: what was refused, the setting, and what to do instead.
    expect(publicUrl.stderr.trim()).toBe(
      'Error: invalid request: body.target_binary_url: https://releases.example.com/devnet-node-1.1.0.mjs is not under an allowed source (ARTIFACT_ALLOWED_SOURCES) nor a stored artifact; add it with `nodeplane artifact add` and name it by binary, version and checksum, or allow its source (docs/artifacts.md)',
    )
    expect(narrow.exitCode).toBe(77)
    expect(narrow.stderr).toContain('admin')
    // The refusals name releases, never a stored digest.
    for (const refused of [unknown, unsigned, otherDigest]) expect(refused.stdout + refused.stderr).not.toMatch(new RegExp(Object.values(digest).join('|')))
    expect(await count()).toBe(before)
  })

  // Refused by the command before any request: one database is enough, so the test exists on
  // SQLite only (it is not registered, rather than skipped, on Postgres).
  if (dialect === 'sqlite') {
    it('refuses a malformed --artifact, one beside the flags it replaces, and an incomplete manual mode', { timeout: 60_000 }, async () => {
      // No API answers there and no key is given: each refusal comes before the API is looked for.
      const nowhere = { NODEPLANE_API_URL: 'http://127.0.0.1:9', NODEPLANE_API_KEY: '' }
      const [malformed, conflicting, incomplete] = await Promise.all([
        run([...BASE, '--artifact', 'devnet-node'], nowhere),
        run([...BASE, '--artifact', 'devnet-node@1.1.0', '--target-url', 'https://releases.example.com/devnet-node-1.1.0.mjs'], nowhere),
        run([...BASE, '--binary-name', 'devnet-node', '--target-version', '1.1.0'], nowhere),
      ])
      expect(malformed.exitCode).toBe(2)
      expect(malformed.stderr).toMatch(/^Error: --artifact "devnet-node" must be BINARY@VERSION/)
      expect(conflicting.exitCode).toBe(2)
      expect(conflicting.stderr).toMatch(/^Error: --artifact names the binary and version itself: drop --target-url/)
      expect(incomplete.exitCode).toBe(2)
      expect(incomplete.stderr).toMatch(/^Error: manual mode \(no --upgrade-id\) needs --artifact BINARY@VERSION, or --target-checksum/)
    })
  }
})
