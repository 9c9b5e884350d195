/**
 * `nodeplane artifact keygen|sign|add|list|show|remove` through the built binary with --json, on
 * both databases (DATABASE_URL) with the blob store in the data directory: a release key pair
 * (private 0600, never overwritten), add signed with the key, with an offline detached signature
 * (checked against ARTIFACT_RELEASE_PUBLIC_KEYS or --public-key), or explicitly unsigned; the
 * bytes stored once by SHA-256; the exit codes of conflicts, unknown artifacts and bad input.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import nacl from 'tweetnacl'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { signedStatement } from '../../src/artifacts/signing.js'
import { createTestDatabase, describeEachDialectConcurrently, type TestDatabase } from '../helpers/db.js'
import { nodeplane, tempDir, type CliResult } from '../helpers/cli.js'
import type { ArtifactView } from '../../src/artifacts/service.js'

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const RELEASE_100 = path.join(REPO, 'chains/devnet/releases/devnet-node-1.0.0.mjs')
const RELEASE_110 = path.join(REPO, 'chains/devnet/releases/devnet-node-1.1.0.mjs')
const sha256 = (file: string) => crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex')


describeEachDialectConcurrently('artifact commands on %s', (dialect) => {
  let t: TestDatabase
  const dir = tempDir()
  const dataDir = path.join(dir, 'data')
  let run: (args: string[], env?: Record<string, string>) => Promise<CliResult>
  beforeAll(async () => {
    t = await createTestDatabase(dialect)
    run = (args, env = {}) => nodeplane(args, { cwd: dir, env: { DATABASE_URL: t.url, NODEPLANE_DATA_DIR: dataDir, ...env } })
  })
  afterAll(async () => {
    await t.destroy()
    fs.rmSync(dir, { recursive: true, force: true })
  })
  const json = <T>(r: CliResult): T => JSON.parse(r.stdout) as T
  const blob = (hex: string) => path.join(dataDir, 'artifacts', 'sha256', hex.slice(0, 2), hex)

  it('keygen, add signed with the key, list and show; the bytes are stored by SHA-256; a second add of the version is a conflict', { timeout: 60_000 }, async () => {
    const keygen = await run(['artifact', 'keygen', '--out', path.join(dir, 'release.key'), '--json'])
    expect(keygen.exitCode, keygen.stderr).toBe(0)
    const key = json<{ key_id: string; public_key: string; private_key_file: string; public_key_file: string }>(keygen)
    expect(key.key_id).toMatch(/^[0-9a-f]{16}$/)
    expect(fs.statSync(key.private_key_file).mode & 0o777).toBe(0o600)
    expect(fs.readFileSync(key.public_key_file, 'utf8').trim()).toBe(key.public_key)
    const again = await run(['artifact', 'keygen', '--out', path.join(dir, 'release.key')])
    expect(again.exitCode).toBe(4)
    expect(again.stderr).toMatch(/^Error: .*release\.key already exists/)

    const added = await run(['artifact', 'add', RELEASE_110, '--binary', 'devnet-node', '--version', '1.1.0', '--key', key.private_key_file, '--json'])
    expect(added.exitCode, added.stderr).toBe(0)
    const artifact = json<ArtifactView>(added)
    expect(artifact).toMatchObject({ binary_name: 'devnet-node', version: '1.1.0', sha256: `sha256:${sha256(RELEASE_110)}`, size_bytes: fs.statSync(RELEASE_110).size, signed: true, key_id: key.key_id })
    // The signature is Ed25519 by the key over the artifact's statement.
    const statement = signedStatement({ binary_name: 'devnet-node', version: '1.1.0', sha256: sha256(RELEASE_110), size_bytes: artifact.size_bytes })
    expect(nacl.sign.detached.verify(statement, Buffer.from(artifact.signature as string, 'base64'), Buffer.from(key.public_key, 'base64'))).toBe(true)
    expect(fs.readFileSync(blob(sha256(RELEASE_110)))).toEqual(fs.readFileSync(RELEASE_110))

    const duplicate = await run(['artifact', 'add', RELEASE_100, '--binary', 'devnet-node', '--version', '1.1.0', '--key', key.private_key_file, '--json'])
    expect(duplicate.exitCode).toBe(4)
    expect(json<{ error: { message: string } }>(duplicate).error.message).toBe('devnet-node 1.1.0 is already in the artifact store')

    // Reads of the same state, side by side.
    const [list, show, text, unknown] = await Promise.all([
      run(['artifact', 'list', '--json']),
      run(['artifact', 'show', '--binary', 'devnet-node', '--version', '1.1.0', '--json']),
      run(['artifact', 'show', '--binary', 'devnet-node', '--version', '1.1.0']),
      run(['artifact', 'show', '--binary', 'devnet-node', '--version', '9.9.9']),
    ])
    expect(json<{ artifacts: ArtifactView[] }>(list).artifacts).toEqual([artifact])
    expect(json<ArtifactView>(show)).toEqual(artifact)
    expect(text.stdout).toContain(`signed:    key ${key.key_id}`)
    expect(unknown.exitCode).toBe(3)
    expect(unknown.stderr).toMatch(/^Error: no artifact devnet-node 9\.9\.9 in the store\n/)
  })

  it('a detached signature made offline is checked against the release public keys; unsigned needs saying so', { timeout: 60_000 }, async () => {
    const keys = await Promise.all(['offline.key', 'other.key'].map((name) => run(['artifact', 'keygen', '--out', path.join(dir, name), '--json'])))
    const [offline, other] = keys.map((k) => json<{ key_id: string; public_key: string; private_key_file: string; public_key_file: string }>(k)) as [
      { key_id: string; public_key: string; private_key_file: string; public_key_file: string },
      { key_id: string; public_key: string; private_key_file: string; public_key_file: string },
    ]
    const signed = await run(['artifact', 'sign', RELEASE_100, '--binary', 'devnet-node', '--version', '1.0.0', '--key', offline.private_key_file, '--json'])
    expect(signed.exitCode, signed.stderr).toBe(0)
    const { signature } = json<{ signature: string }>(signed)

    // Not one of the configured keys, or the signature of another version: refused, nothing stored.
    const [wrongKey, relabelled, none] = await Promise.all([
      run(['artifact', 'add', RELEASE_100, '--binary', 'devnet-node', '--version', '1.0.0', '--signature', signature, '--json'], { ARTIFACT_RELEASE_PUBLIC_KEYS: other.public_key }),
      run(['artifact', 'add', RELEASE_100, '--binary', 'devnet-node', '--version', '1.0.1', '--signature', signature], { ARTIFACT_RELEASE_PUBLIC_KEYS: offline.public_key }),
      run(['artifact', 'add', RELEASE_100, '--binary', 'devnet-node', '--version', '1.0.0', '--signature', signature]),
    ])
    // Bad input: exit 2, as every command's validation errors (docs/cli.md).
    expect(wrongKey.exitCode).toBe(2)
    expect(json<{ error: { message: string } }>(wrongKey).error.message).toBe('signature mismatch')
    expect(relabelled.exitCode).toBe(2)
    expect(relabelled.stderr).toMatch(/^Error: signature mismatch\n/)
    expect(none.stderr).toContain('no release public key to check it against')
    expect(fs.existsSync(blob(sha256(RELEASE_100)))).toBe(false)

    // From a file, checked against the .pub given on the command line.
    const sigFile = path.join(dir, 'devnet-node-1.0.0.sig')
    fs.writeFileSync(sigFile, `${signature}\n`)
    const added = await run(['artifact', 'add', RELEASE_100, '--binary', 'devnet-node', '--version', '1.0.0', '--signature', sigFile, '--public-key', offline.public_key_file, '--json'], { ARTIFACT_RELEASE_PUBLIC_KEYS: other.public_key })
    expect(added.exitCode, added.stderr).toBe(0)
    expect(json<ArtifactView>(added)).toMatchObject({ version: '1.0.0', signed: true, key_id: offline.key_id, signature })

    const unsaid = await run(['artifact', 'add', RELEASE_100, '--binary', 'devnet-node', '--version', '1.0.0-dev'])
    expect(unsaid.exitCode).toBe(2)
    expect(unsaid.stderr).toMatch(/^Error: say how the artifact is signed: --key FILE, --signature SIG, or --unsigned\n/)
    const unsigned = await run(['artifact', 'add', RELEASE_100, '--binary', 'devnet-node', '--version', '1.0.0-dev', '--unsigned', '--json'])
    expect(json<ArtifactView>(unsigned)).toMatchObject({ version: '1.0.0-dev', signed: false, key_id: null, signature: null })
    expect((await run(['artifact', 'list', '--binary', 'devnet-node'])).stdout).toContain('UNSIGNED (rollouts refuse it)')
  })

  it('remove keeps bytes another version still has; bad names and missing files are one-line errors', { timeout: 60_000 }, async () => {
    const hex = sha256(RELEASE_100)
    const first = await run(['artifact', 'remove', '--binary', 'devnet-node', '--version', '1.0.0-dev', '--yes', '--json'])
    expect(first.exitCode, first.stderr).toBe(0)
    expect(json<ArtifactView>(first)).toMatchObject({ version: '1.0.0-dev' })
    expect(fs.existsSync(blob(hex))).toBe(true)
    // Not a terminal and no --yes: refused (exit 2), nothing removed; with --yes it goes.
    const unconfirmed = await run(['artifact', 'remove', '--binary', 'devnet-node', '--version', '1.0.0'])
    expect(unconfirmed.exitCode).toBe(2)
    expect(unconfirmed.stderr).toMatch(/^Error: refusing to remove devnet-node 1\.0\.0 from the artifact store without --yes/)
    expect(fs.existsSync(blob(hex))).toBe(true)
    const last = await run(['artifact', 'remove', '--binary', 'devnet-node', '--version', '1.0.0', '--yes'])
    expect(last.exitCode, last.stderr).toBe(0)
    expect(fs.existsSync(blob(hex))).toBe(false)
    const gone = await run(['artifact', 'remove', '--binary', 'devnet-node', '--version', '1.0.0', '--yes'])
    expect(gone.exitCode).toBe(3)

    const [badName, missing, badKey] = await Promise.all([
      run(['artifact', 'add', RELEASE_100, '--binary', '../evil', '--version', '1.0.0', '--unsigned']),
      run(['artifact', 'add', path.join(dir, 'nothing'), '--binary', 'devnet-node', '--version', '2.0.0', '--unsigned']),
      run(['artifact', 'add', RELEASE_100, '--binary', 'devnet-node', '--version', '2.0.0', '--key', RELEASE_100]),
    ])
    expect([badName.exitCode, missing.exitCode, badKey.exitCode]).toEqual([2, 2, 2])
    expect(badName.stderr).toMatch(/^Error: invalid artifact name\n {2}--binary "\.\.\/evil"/)
    expect(missing.stderr).toMatch(/^Error: cannot read .*nothing\n {2}ENOENT/)
    expect(badKey.stderr).toMatch(/^Error: .*devnet-node-1\.0\.0\.mjs is not a nodeplane release key\n/)
    expect(json<{ artifacts: ArtifactView[] }>(await run(['artifact', 'list', '--json'])).artifacts.map((a) => a.version)).toEqual(['1.1.0'])
  })
})
