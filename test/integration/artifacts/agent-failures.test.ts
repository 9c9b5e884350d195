/**
 * What an agent says when it cannot install an artifact (src/node-agent/artifacts.ts), against real
 * loopback HTTP servers and files: a closed port, an open port answering 404, a redirect and a
 * missing file are the same "artifact not found" (the URL's owner learns nothing about the
 * host's ports or files), a redirect is never followed, and a checksum mismatch names no digest,
 * neither in the error nor in the agent's log; a signed artifact installs only when its release
 * signature verifies against the agent's keys. No database is involved.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { acquireArtifact, ensureInstalled } from '../../../src/node-agent/artifacts.js'
import { openStateDir, releaseBinaryPath, type StateDir } from '../../../src/node-agent/state-dir.js'
import { generateReleaseKey, parsePublicKey, signArtifact } from '../../../src/artifacts/signing.js'
import { createLogger } from '../../../src/log.js'
import { tempDir } from '../../helpers/cli.js'
import { freePort } from '../../helpers/ports.js'
import { LogCapture } from '../http/harness.js'

const dir = tempDir()
const masterKey = path.join(dir, 'master.key')
fs.writeFileSync(masterKey, crypto.randomBytes(32))
const masterKeyDigest = crypto.createHash('sha256').update(fs.readFileSync(masterKey)).digest('hex')
const claimed = 'ab'.repeat(32)

let stateDir: StateDir
let logs: LogCapture
let logger: ReturnType<typeof createLogger>
const servers: http.Server[] = []
/** Requests the "internal" server received (a redirect's target). */
const internalHits: string[] = []
let notFoundUrl: string
let redirectUrl: string

async function listen(handler: http.RequestListener): Promise<string> {
  const server = http.createServer(handler)
  servers.push(server)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

beforeAll(async () => {
  stateDir = openStateDir(path.join(dir, 'agent'))
  logs = new LogCapture()
  logger = createLogger({ destination: logs, level: 'debug' })
  const internal = await listen((req, res) => {
    internalHits.push(req.url ?? '')
    res.writeHead(200).end(fs.readFileSync(masterKey))
  })
  notFoundUrl = `${await listen((_req, res) => res.writeHead(404).end('no such file'))}/devnet-node-1.2.0.mjs`
  redirectUrl = `${await listen((_req, res) => res.writeHead(302, { location: `${internal}/master.key` }).end())}/devnet-node-1.2.0.mjs`
})
afterAll(async () => {
  await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))))
  fs.rmSync(dir, { recursive: true, force: true })
})

const spec = (url: string) => ({ version: '1.2.0', url, sha256: claimed })
async function failure(url: string): Promise<string> {
  return acquireArtifact(stateDir, 'devnet-node', spec(url), { logger }).then(
    () => 'acquired',
    (err: unknown) => (err as Error).message,
  )
}

describe('agent artifact failures', () => {
  it('a closed port, an open port answering 404, a redirect and a missing file are all "artifact not found"', async () => {
    const closedUrl = `http://127.0.0.1:${await freePort()}/devnet-node-1.2.0.mjs`
    const missingFile = pathToFileURL(path.join(dir, 'nothing-here')).href
    const answers = { closed: await failure(closedUrl), open: await failure(notFoundUrl), redirect: await failure(redirectUrl), missing: await failure(missingFile) }
    expect(answers).toEqual({
      closed: `artifact not found at ${closedUrl}`,
      open: `artifact not found at ${notFoundUrl}`,
      redirect: `artifact not found at ${redirectUrl}`,
      missing: `artifact not found at ${missingFile}`,
    })
    // Told apart only by the URL each was given: the same words once the port is hidden.
    expect(new Set([answers.closed, answers.open, answers.redirect].map((m) => m.replace(/:\d+\//, ':PORT/'))).size).toBe(1)
    // The redirect pointed at an internal service: it was not followed.
    expect(internalHits).toEqual([])
    expect(fs.readdirSync(stateDir.downloadsDir)).toEqual([])
  })

  it('a file that is not the artifact fails as "artifact checksum mismatch" with no digest in the error or the log', async () => {
    const err = await ensureInstalled(stateDir, 'devnet-node', spec(pathToFileURL(masterKey).href), { logger }).then(
      () => undefined,
      (e: unknown) => e as Error,
    )
    expect(err?.message).toBe('artifact checksum mismatch')
    expect(fs.readdirSync(stateDir.downloadsDir)).toEqual([])
    const text = logs.text()
    expect(text).toContain('artifact acquired')
    expect(text).not.toContain(masterKeyDigest.slice(0, 16))
    // The agent's log keeps each cause for its operator (never a digest).
    expect(logs.lines.filter((l) => l.msg === 'artifact not found').map((l) => l.cause)).toEqual(['ECONNREFUSED', 'HTTP 404', 'HTTP 302', 'ENOENT'])
  })

  it('a signed artifact installs only when its signature verifies against the agent\'s release keys; a failure names no digest', async () => {
    const file = path.join(dir, 'chain-2.0.0')
    fs.writeFileSync(file, 'a release\n')
    const sha256 = crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex')
    const identity = { binary_name: 'chain', version: '2.0.0', sha256, size_bytes: fs.statSync(file).size }
    const [release, other] = [generateReleaseKey(), generateReleaseKey()]
    const keys = [parsePublicKey(release.public_key)!]
    const artifact = (signature: string) => ({ version: '2.0.0', url: pathToFileURL(file).href, sha256, signature })
    const install = (signature: string, releaseKeys: typeof keys) =>
      ensureInstalled(stateDir, 'chain', artifact(signature), { logger, releaseKeys }).then(
        () => 'installed',
        (err: unknown) => (err as Error).message,
      )
    // Another key; the right key over another version (relabelled); no key configured to check it.
    expect(await install(signArtifact(identity, other.secretKey), keys)).toBe('artifact signature mismatch')
    expect(await install(signArtifact({ ...identity, version: '2.0.1' }, release.secretKey), keys)).toBe('artifact signature mismatch')
    expect(await install(signArtifact(identity, release.secretKey), [])).toBe('artifact signature mismatch')
    expect(fs.existsSync(releaseBinaryPath(stateDir, 'chain', '2.0.0'))).toBe(false)
    expect(logs.text()).not.toContain(sha256.slice(0, 16))
    expect(await install(signArtifact(identity, release.secretKey), keys)).toBe('installed')
    expect(fs.readFileSync(releaseBinaryPath(stateDir, 'chain', '2.0.0'), 'utf8')).toBe('a release\n')
  })
})
