/**
 * Upgrade manifests (src/rollouts/manifests.ts): the shipped devnet examples load, every
 * validation error is reported with its field, the content hash is over the raw bytes, and ids
 * that could leave upgrades/<chain>/ are refused before any file is opened.
 */
import { createHash } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { afterEach, beforeAll, describe, expect, it } from 'vitest'
import { commandPayloads } from '../../../src/agent-gateway/protocol.js'
import { loadChainCatalogue, type ChainProfile } from '../../../src/config/chains.js'
import { ValidationError } from '../../../src/errors.js'
import { listUpgradeIds, loadUpgradeManifest, manifestPath, renderConfigChanges } from '../../../src/rollouts/manifests.js'

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')
const release110 = path.join(repoRoot, 'chains/devnet/releases/devnet-node-1.1.0.mjs')
const checksum110 = 'sha256:9479d9205664a5fb6fd2e997c9f2ed3f88aabbddd3837bb1b774bacd5f8ea7ae'
const temps: string[] = []
let devnet: ChainProfile

beforeAll(async () => {
  const catalogue = await loadChainCatalogue(repoRoot)
  devnet = catalogue.profiles.get('devnet') as ChainProfile
})

afterEach(() => {
  for (const dir of temps.splice(0)) fs.rmSync(dir, { recursive: true, force: true })
})

const VALID = `binary_name: devnet-node
target_version: "1.1.0"
artifact: ${pathToFileURL(release110).href}
checksum: ${checksum110}
migration_type: non_breaking
recovery_plan: restore the backup
state_compatibility:
  compatible_source_versions: ["1.0.0"]
`

/** A config dir with upgrades/devnet/<id>.yaml holding `text`. */
function configDirWith(files: Record<string, string | Buffer>): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-upgrades-'))
  temps.push(dir)
  for (const [name, text] of Object.entries(files)) {
    const file = path.join(dir, 'upgrades', 'devnet', name)
    fs.mkdirSync(path.dirname(file), { recursive: true })
    fs.writeFileSync(file, text)
  }
  return dir
}

async function problemOf(promise: Promise<unknown>): Promise<ValidationError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  )
  expect(err).toBeInstanceOf(ValidationError)
  return err as ValidationError
}

describe('upgrade manifests', () => {
  it('loads the shipped devnet-1.1.0 manifest: the chain release as a file:// URL, its checksum, the hash of the file bytes', async () => {
    const manifest = await loadUpgradeManifest(repoRoot, 'devnet', 'devnet-1.1.0', devnet)
    const file = path.join(repoRoot, 'upgrades/devnet/devnet-1.1.0.yaml')
    expect(manifest).toMatchObject({
      chain_profile_id: 'devnet',
      upgrade_id: 'devnet-1.1.0',
      file,
      binary_name: 'devnet-node',
      target_version: '1.1.0',
      target_binary_url: pathToFileURL(release110).href,
      target_binary_checksum: checksum110,
      migration_type: 'non_breaking',
      manifest_content_hash: `sha256:${createHash('sha256').update(fs.readFileSync(file)).digest('hex')}`,
    })
    expect(manifest.data.state_compatibility).toEqual({ compatible_source_versions: ['1.0.0'] })
    expect(manifest.data.recovery_plan).toContain('backup')
    expect(manifest.data.config_changes?.files?.[0]?.path).toBe('config/devnet.json')
    // The release the chain profile lists for 1.1.0 is the same artifact.
    expect(devnet.releases.find((r) => r.version === '1.1.0')).toMatchObject({ url: manifest.target_binary_url, sha256: checksum110.slice('sha256:'.length) })

    const breaking = await loadUpgradeManifest(repoRoot, 'devnet', 'devnet-1.1.0-breaking', devnet)
    expect(breaking).toMatchObject({ migration_type: 'breaking', target_version: '1.1.0', target_binary_checksum: checksum110 })
    expect(breaking.data.config_changes).toBeNull()
    expect(await listUpgradeIds(repoRoot, 'devnet')).toEqual(expect.arrayContaining(['devnet-1.1.0', 'devnet-1.1.0-breaking']))
  })

  it('the shipped manifests name nodeplane commands as the CLI takes them: every required flag, no unknown one', async () => {
    const commandsDir = path.join(repoRoot, 'commands')
    const named: string[] = []
    for (const id of await listUpgradeIds(repoRoot, 'devnet')) {
      // A command may run over a line break, in a comment ("# ") or in the block scalar ("  ").
      const text = fs.readFileSync(manifestPath(repoRoot, 'devnet', id), 'utf8').replace(/\n[#\s]*/g, ' ')
      for (const [, line] of text.matchAll(/`nodeplane ([^`]+)`/g)) {
        const words = (line as string).split(/\s+/)
        const file = [2, 1].map((n) => path.join(commandsDir, ...words.slice(0, n)) + '.ts').find((f) => fs.existsSync(f))
        expect(file, `${id}: nodeplane ${line}`).toBeDefined()
        const command = ((await import(file as string)) as { default: { flags: Record<string, { required?: boolean; aliases?: string[] }> } }).default
        // A flag's aliases (the older subject flags, docs/cli.md "Ids") are its name too.
        const aliases = Object.fromEntries(Object.entries(command.flags).flatMap(([name, flag]) => (flag.aliases ?? []).map((alias) => [alias, name])))
        const given = words.filter((w) => w.startsWith('--')).map((w) => aliases[w.slice(2)] ?? w.slice(2))
        const required = Object.entries(command.flags).filter(([, flag]) => flag.required).map(([name]) => name)
        expect(required.filter((f) => !given.includes(f)), `${id}: nodeplane ${line}`).toEqual([])
        expect(given.filter((f) => !(f in command.flags)), `${id}: nodeplane ${line}`).toEqual([])
        named.push(words.slice(0, 2).join(' '))
      }
    }
    expect(named).toEqual(expect.arrayContaining(['rollout create', 'node migrate', 'rollout rollback']))
  })

  it('renders config_changes per node into a valid upgrade command payload', async () => {
    const manifest = await loadUpgradeManifest(repoRoot, 'devnet', 'devnet-1.1.0', devnet)
    const rendered = renderConfigChanges(devnet, 'archive', manifest.target_version, manifest.data.config_changes, { rpc_port: 18545, node_id: 'n1' })
    expect(rendered.config_version).toBe('devnet-1.1.0')
    const content = JSON.parse(rendered.config_files?.[0]?.content ?? '{}') as Record<string, unknown>
    expect(content).toMatchObject({ rpc_port: 18545, archive: true })
    const payload = commandPayloads.upgrade.parse({ artifact: { version: '1.1.0', url: manifest.target_binary_url, sha256: checksum110.slice(7) }, ...rendered })
    expect(payload.config_files).toHaveLength(1)
    expect(renderConfigChanges(devnet, 'full', '1.1.0', null, { rpc_port: 1, node_id: 'n' })).toEqual({})
  })

  it('hashes the raw bytes: a comment or a line ending changes manifest_content_hash, not the content', async () => {
    const crlf = Buffer.from(VALID.replaceAll('\n', '\r\n'))
    const dir = configDirWith({ 'a.yaml': VALID, 'b.yaml': `# a comment\n${VALID}`, 'c.yaml': crlf })
    const [a, b, c] = await Promise.all(['a', 'b', 'c'].map((id) => loadUpgradeManifest(dir, 'devnet', id, devnet)))
    expect(a?.manifest_content_hash).toBe(`sha256:${createHash('sha256').update(VALID).digest('hex')}`)
    expect(c?.manifest_content_hash).toBe(`sha256:${createHash('sha256').update(crlf).digest('hex')}`)
    expect(new Set([a?.manifest_content_hash, b?.manifest_content_hash, c?.manifest_content_hash]).size).toBe(3)
    expect(b?.target_binary_checksum).toBe(a?.target_binary_checksum)
  })

  it('resolves a relative artifact beside the manifest to an absolute file:// URL', async () => {
    const dir = configDirWith({ 'local.yaml': VALID.replace(/^artifact: .*$/m, 'artifact: devnet-node-1.1.0.mjs') })
    fs.copyFileSync(release110, path.join(dir, 'upgrades/devnet/devnet-node-1.1.0.mjs'))
    const manifest = await loadUpgradeManifest(dir, 'devnet', 'local', devnet)
    expect(manifest.target_binary_url).toBe(pathToFileURL(path.join(dir, 'upgrades/devnet/devnet-node-1.1.0.mjs')).href)
    // Loading only resolves it; a rollout refuses it unless it lies under ARTIFACT_ALLOWED_SOURCES
    // (test/integration/rollouts/artifact-sources.test.ts, both databases).
    const remote = configDirWith({ 'remote.yaml': VALID.replace(/^artifact: .*$/m, 'artifact: https://releases.example.test/devnet-node-1.1.0.mjs') })
    expect((await loadUpgradeManifest(remote, 'devnet', 'remote')).target_binary_url).toBe('https://releases.example.test/devnet-node-1.1.0.mjs')
  })

  const cases: [string, (yaml: string) => string, string][] = [
    ['an unknown field', (y) => `${y}rollback_to: "1.0.0"\n`, "Unrecognized key(s) in object: 'rollback_to'"],
    ['a missing binary_name', (y) => y.replace(/^binary_name: .*\n/m, ''), 'binary_name: Required'],
    ['another binary than the nodes run', (y) => y.replace(/^binary_name: .*$/m, 'binary_name: sidecar'), "binary_name: devnet's nodes run one binary, devnet-node; sidecar is not it"],
    ['a numeric version', (y) => y.replace('target_version: "1.1.0"', 'target_version: 1.10'), 'target_version: must be a string'],
    ['a bare hex checksum', (y) => y.replace(checksum110, checksum110.slice(7)), 'checksum: must be sha256:<64 lowercase hex digits>'],
    ['an unknown migration_type', (y) => y.replace('non_breaking', 'hard_fork'), 'migration_type: Invalid enum value'],
    ['an empty recovery_plan', (y) => y.replace('recovery_plan: restore the backup', 'recovery_plan: "  "'), 'recovery_plan: must say what an operator does'],
    ['no state compatibility', (y) => y.replace(/state_compatibility:\n.*\n/m, ''), 'state_compatibility: Required'],
    ['an empty compatible_source_versions', (y) => y.replace('["1.0.0"]', '[]'), 'state_compatibility.compatible_source_versions: Array must contain at least 1'],
    ['the target among the sources', (y) => y.replace('["1.0.0"]', '["1.0.0", "1.1.0"]'), 'lists the target version 1.1.0'],
    ['a checksum that does not match the artifact', (y) => y.replace(checksum110, `sha256:${'0'.repeat(64)}`), 'checksum: '],
    ['an artifact that does not exist', (y) => y.replace(/^artifact: .*$/m, 'artifact: missing.mjs'), 'artifact: cannot read'],
    ['an ftp artifact', (y) => y.replace(/^artifact: .*$/m, 'artifact: ftp://example.test/a'), 'artifact: must be a path, a file:// URL or an http(s):// URL'],
    ['invalid YAML', (y) => `${y}  - : [\n`, 'upgrades/devnet/m.yaml: '],
    ['a config file outside config/', (y) => `${y}config_changes:\n  files:\n    - path: data/x.json\n      template: "{}"\n`, 'config_changes.files[0].path: must be inside config/'],
    ['a config file escaping the node directory', (y) => `${y}config_changes:\n  files:\n    - path: config/../../etc/x\n      template: "{}"\n`, 'config_changes.files[0].path: must be a relative path inside the node directory'],
    ['empty config_changes', (y) => `${y}config_changes: {}\n`, 'config_changes: must change something'],
    ['a template with an unknown variable', (y) => `${y}config_changes:\n  files:\n    - path: config/devnet.json\n      template: "{{rpc_prt}}"\n`, 'config_changes (node type full): config_changes.files[0].template: unknown variable {{rpc_prt}}'],
  ]
  it.each(cases)('refuses %s, naming the field', async (_name, edit, expected) => {
    const dir = configDirWith({ 'm.yaml': edit(VALID) })
    const err = await problemOf(loadUpgradeManifest(dir, 'devnet', 'm', devnet))
    expect(err.message).toBe('invalid upgrade manifest upgrades/devnet/m.yaml')
    expect(err.details).toContain(expected)
  })

  it('refuses a manifest claiming a chain release version with another artifact', async () => {
    const release100 = path.join(repoRoot, 'chains/devnet/releases/devnet-node-1.0.0.mjs')
    const other = `sha256:${createHash('sha256').update(fs.readFileSync(release100)).digest('hex')}`
    const dir = configDirWith({ 'm.yaml': VALID.replace(release110, release100).replace(checksum110, other) })
    const err = await problemOf(loadUpgradeManifest(dir, 'devnet', 'm', devnet))
    expect(err.details).toContain(`checksum: devnet release 1.1.0 has ${checksum110}`)
    // Without the profile (no catalogue at hand) the file alone is valid.
    await expect(loadUpgradeManifest(dir, 'devnet', 'm')).resolves.toMatchObject({ target_binary_checksum: other })
  })

  it('reports a missing manifest with the ids that exist', async () => {
    const dir = configDirWith({ 'one.yaml': VALID, 'two.yaml': VALID })
    const err = await problemOf(loadUpgradeManifest(dir, 'devnet', 'three', devnet))
    expect(err.message).toBe('no upgrade manifest upgrades/devnet/three.yaml')
    expect(err.details).toContain('available for devnet: one, two')
    expect((await problemOf(loadUpgradeManifest(dir, 'other-chain', 'one'))).details).toContain('available for other-chain: none')
  })

  it.each([
    ['../devnet', 'devnet-1.1.0'],
    ['devnet', '../devnet/devnet-1.1.0'],
    ['devnet', '..'],
    ['devnet', '.hidden'],
    ['devnet', 'a/b'],
    ['devnet', 'a\\b'],
    ['devnet', '/etc/passwd'],
    ['devnet', 'Devnet-1.1.0'],
    ['devnet', ''],
    ['devnet', 'x'.repeat(201)],
    ['', 'devnet-1.1.0'],
    ['devnet\0', 'devnet-1.1.0'],
  ])('refuses path traversal and odd ids before reading: chain %j, upgrade %j', async (chain, upgrade) => {
    expect(() => manifestPath(repoRoot, chain, upgrade)).toThrow(ValidationError)
    const err = await problemOf(loadUpgradeManifest(repoRoot, chain, upgrade))
    expect(err.message).toBe('invalid upgrade id')
  })
})
