import { execFile } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { afterEach, describe, expect, it } from 'vitest'
import { commandPayloads } from '../../src/agent-gateway/protocol.js'
import {
  DURATIONS,
  defaultConfigDir,
  getProfile,
  loadChainCatalogue,
  releaseFor,
  renderNodeConfig,
  renderTemplate,
  resolvePlacement,
} from '../../src/config/chains.js'
import { ConfigError, ValidationError } from '../../src/errors.js'

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const temps: string[] = []

afterEach(() => {
  for (const dir of temps.splice(0)) fs.rmSync(dir, { recursive: true, force: true })
})

/** A config dir holding a copy of the devnet chain, its profile.yaml passed through `edit`. */
function configDirWith(edit: (yaml: string) => string = (y) => y, chainFolder = 'devnet'): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-chains-'))
  temps.push(dir)
  const target = path.join(dir, 'chains', chainFolder)
  fs.cpSync(path.join(repoRoot, 'chains', 'devnet'), target, { recursive: true })
  const profile = path.join(target, 'profile.yaml')
  fs.writeFileSync(profile, edit(fs.readFileSync(profile, 'utf8')))
  return dir
}

async function problemsOf(configDir: string): Promise<readonly string[]> {
  const error = await loadChainCatalogue(configDir).then(
    () => undefined,
    (err: unknown) => err,
  )
  expect(error).toBeInstanceOf(ConfigError)
  return (error as ConfigError).problems
}

function thrownBy(fn: () => unknown): unknown {
  try {
    fn()
  } catch (err) {
    return err
  }
  return undefined
}

function replaceOnce(text: string, from: string | RegExp, to: string): string {
  const next = text.replace(from, to)
  if (next === text) throw new Error(`profile.yaml no longer contains ${String(from)}`)
  return next
}

describe('the chain catalogue', () => {
  it('uses the package root as the default config dir and loads the devnet chain from it', async () => {
    expect(defaultConfigDir()).toBe(repoRoot)
    const catalogue = await loadChainCatalogue(defaultConfigDir())
    const devnet = getProfile(catalogue, 'devnet')
    expect(devnet.binary_name).toBe('devnet-node')
    expect(devnet.runtime).toBe('node')
    expect(devnet.default_version).toBe('1.0.0')
    expect(devnet.inputs.filter((i) => i.source === 'chain_generated').map((i) => i.path)).toEqual(['data/nodekey'])
    expect(devnet.releases.map((r) => r.version)).toEqual(['1.0.0', '1.1.0'])
    for (const release of devnet.releases) {
      expect(release.url).toMatch(/^file:\/\//)
      expect(fs.existsSync(fileURLToPath(release.url))).toBe(true)
    }
  })

  it('refuses an unknown chain profile with a validation error naming the known ones', async () => {
    const catalogue = await loadChainCatalogue(repoRoot)
    expect(() => getProfile(catalogue, 'bitcoin')).toThrow(ValidationError)
    expect(() => getProfile(catalogue, 'bitcoin')).toThrow(/unknown chain profile "bitcoin"/)
  })

  it('has release files that match what the generator builds from the template', async () => {
    const { stdout } = await promisify(execFile)(process.execPath, [path.join(repoRoot, 'scripts/build-devnet-releases.mjs'), '--check'])
    expect(stdout).toMatch(/devnet-node-1\.0\.0\.mjs/)
    expect(stdout).toMatch(/devnet-node-1\.1\.0\.mjs/)
  })
})

describe('placement', () => {
  it('resolves provider, region and instance type for every node type and duration of devnet', async () => {
    const devnet = getProfile(await loadChainCatalogue(repoRoot), 'devnet')
    const expected = { full: 'local.small', archive: 'local.large' } as const
    for (const nodeType of ['full', 'archive'] as const) {
      for (const duration of DURATIONS) {
        expect(resolvePlacement(devnet, nodeType, duration)).toEqual({ provider: 'local', region: 'local', instance_type: expected[nodeType] })
      }
    }
  })

  it('refuses an unknown node type or duration with a validation error', async () => {
    const devnet = getProfile(await loadChainCatalogue(repoRoot), 'devnet')
    expect(() => resolvePlacement(devnet, 'validator', '1m')).toThrow(ValidationError)
    expect(() => resolvePlacement(devnet, 'validator', '1m')).toThrow(/no node type "validator"/)
    expect(() => resolvePlacement(devnet, 'full', '5y')).toThrow(ValidationError)
    expect(() => resolvePlacement(devnet, 'full', '5y')).toThrow(/not offered for duration "5y"/)
    // Inherited object keys are not node types.
    expect(() => resolvePlacement(devnet, 'constructor', '1m')).toThrow(ValidationError)
  })

  it('lets a duration override the instance type, for all node types or for one, and offer only some durations', async () => {
    const dir = configDirWith((yaml) =>
      replaceOnce(
        replaceOnce(yaml, '  3m: { provider: local, region: local }\n', '  3m: { provider: cloud, region: eu-1, instance_type: c.medium }\n'),
        '  6m: { provider: local, region: local }\n',
        '  6m: { provider: cloud, region: eu-2, instance_type: c.medium, instance_types: { archive: c.huge } }\n',
      ).replace('  2w: { provider: local, region: local }\n', ''),
    )
    const devnet = getProfile(await loadChainCatalogue(dir), 'devnet')
    expect(resolvePlacement(devnet, 'full', '1w')).toEqual({ provider: 'local', region: 'local', instance_type: 'local.small' })
    expect(resolvePlacement(devnet, 'archive', '3m')).toEqual({ provider: 'cloud', region: 'eu-1', instance_type: 'c.medium' })
    expect(resolvePlacement(devnet, 'full', '6m')).toEqual({ provider: 'cloud', region: 'eu-2', instance_type: 'c.medium' })
    expect(resolvePlacement(devnet, 'archive', '6m')).toEqual({ provider: 'cloud', region: 'eu-2', instance_type: 'c.huge' })
    const error = thrownBy(() => resolvePlacement(devnet, 'full', '2w'))
    expect(error).toBeInstanceOf(ValidationError)
    expect((error as ValidationError).message).toBe('chain devnet is not offered for duration "2w"')
    expect((error as ValidationError).details).toBe('duration must be one of: 1w, 1m, 3m, 6m')
  })
})

describe('rendering a node configuration', () => {
  it('renders the configure command for a full node at the default version', async () => {
    const devnet = getProfile(await loadChainCatalogue(repoRoot), 'devnet')
    const config = renderNodeConfig(devnet, 'full', { rpc_port: 18_545, node_id: 'node-1' })
    expect(commandPayloads.configure.parse(config)).toEqual(config)
    expect(config.binary_name).toBe('devnet-node')
    expect(config.artifact).toEqual(releaseFor(devnet, '1.0.0'))
    expect(config.run).toEqual({ runtime: 'node', args: ['--config', '{config_dir}/devnet.json', '--data-dir', '{data_dir}'], env: {} })
    expect(config.probe).toEqual({ type: 'ethereum_jsonrpc', url: 'http://127.0.0.1:18545', timeout_ms: 5000, startup_grace_ms: 60_000 })
    expect(config.files).toHaveLength(1)
    expect(config.files[0]?.path).toBe('config/devnet.json')
    expect(config.files[0]?.mode).toBe(0o644)
    const rendered = JSON.parse(config.files[0]?.content ?? '') as Record<string, unknown>
    expect(rendered).toMatchObject({ rpc_port: 18_545, rpc_host: '127.0.0.1', archive: false })
  })

  it("binds the RPC and aims the probe at rpc_host (a fleet host's private address), refusing wildcards and names", async () => {
    const catalogue = await loadChainCatalogue(repoRoot)
    const devnet = getProfile(catalogue, 'devnet')
    const config = renderNodeConfig(devnet, 'full', { rpc_port: 10_001, rpc_host: '10.213.4.2', node_id: 'node-1' })
    expect(JSON.parse(config.files[0]?.content ?? '')).toMatchObject({ rpc_port: 10_001, rpc_host: '10.213.4.2' })
    expect(config.probe).toMatchObject({ url: 'http://10.213.4.2:10001' })
    const litecoin = getProfile(catalogue, 'litecoin')
    const conf = renderNodeConfig(litecoin, 'full', { rpc_port: 10_002, rpc_host: '10.213.4.2', node_id: 'node-2' }, { evenUnavailable: true }).files[0]?.content ?? ''
    // The host itself (the probe) and, by default, nobody else.
    expect(conf.match(/^rpc(bind|allowip)=.*$/gm)).toEqual(['rpcbind=10.213.4.2', 'rpcallowip=10.213.4.2', 'rpcallowip=127.0.0.1'])
    // Wildcards, names, junk, public addresses (the chain's RPC has no authentication of its own)
    // and IPv6 (not bracketed in the probe's URL yet).
    for (const refused of ['0.0.0.0', '::', '0:0::0', 'db.internal', '10.0.0.1; rm -rf /', '', '8.8.8.8', '172.32.0.1', '192.169.0.1', 'fd00::5', '::1']) {
      expect(() => renderNodeConfig(devnet, 'full', { rpc_port: 10_001, rpc_host: refused, node_id: 'n' }), refused).toThrow(/is not a loopback or private IPv4 address/)
    }
    for (const accepted of ['127.0.0.1', '10.0.0.1', '172.16.0.1', '172.31.255.254', '192.168.1.10']) {
      expect(renderNodeConfig(devnet, 'full', { rpc_port: 10_001, rpc_host: accepted, node_id: 'n' }).files[0]?.content, accepted).toContain(accepted)
    }
  })

  it('renders node-type variables and a chosen release', async () => {
    const devnet = getProfile(await loadChainCatalogue(repoRoot), 'devnet')
    const config = renderNodeConfig(devnet, 'archive', { rpc_port: 20_000, node_id: 'node-2', version: '1.1.0' })
    expect(config.artifact.version).toBe('1.1.0')
    expect(config.artifact.url).toMatch(/devnet-node-1\.1\.0\.mjs$/)
    expect(JSON.parse(config.files[0]?.content ?? '')).toMatchObject({ rpc_port: 20_000, archive: true })
    expect(() => renderNodeConfig(devnet, 'archive', { rpc_port: 20_000, node_id: 'n', version: '9.9.9' })).toThrow(/no release 9\.9\.9/)
    expect(() => renderNodeConfig(devnet, 'light', { rpc_port: 20_000, node_id: 'n' })).toThrow(ValidationError)
    expect(() => renderNodeConfig(devnet, 'full', { rpc_port: 70_000, node_id: 'n' })).toThrow(ValidationError)
  })

  it('substitutes {{name}} only and fails on an unknown variable', () => {
    expect(renderTemplate('port={{rpc_port}} again={{ rpc_port }} {data_dir} {single}', { rpc_port: '1' })).toBe('port=1 again=1 {data_dir} {single}')
    expect(() => renderTemplate('x={{rpc_prot}}', { rpc_port: '1' }, 'config_files[0].template')).toThrow(ConfigError)
    expect(() => renderTemplate('x={{rpc_prot}}', { rpc_port: '1' }, 'config_files[0].template')).toThrow(
      /config_files\[0\]\.template: unknown variable \{\{rpc_prot\}\} \(known: rpc_port\)/,
    )
    expect(() => renderTemplate('{{toString}}', {})).toThrow(/unknown variable/)
  })

  it('refuses at load time a profile whose template uses an unknown variable', async () => {
    const dir = configDirWith((yaml) => replaceOnce(yaml, '"peers": 3,', '"peers": {{peer_count}},'))
    const problems = await problemsOf(dir)
    expect(problems).toHaveLength(2)
    expect(problems[0]).toMatch(/^chains\/devnet\/profile\.yaml: node type full: config_files\[0\]\.template: unknown variable \{\{peer_count\}\}/)
    expect(problems[1]).toMatch(/node type archive:/)
  })
})

describe('profile validation', () => {
  it('names the file and every offending field', async () => {
    const dir = configDirWith((yaml) => {
      let next = replaceOnce(yaml, 'binary_name: devnet-node\n', '')
      next = replaceOnce(next, 'runtime: node', 'runtime: jvm')
      next = replaceOnce(next, 'instance_type: local.small', 'instance_typ: local.small')
      next = replaceOnce(next, '  1w: {', '  1y: {')
      next = replaceOnce(next, /sha256: [0-9a-f]{64}/, 'sha256: not-a-hash')
      next = replaceOnce(next, 'path: config/devnet.json', 'path: ../devnet.json')
      return next
    })
    const problems = await problemsOf(dir)
    const text = problems.join('\n')
    for (const problem of problems) expect(problem).toMatch(/^chains\/devnet\/profile\.yaml: /)
    expect(text).toMatch(/binary_name: Required/)
    expect(text).toMatch(/runtime: Invalid enum value/)
    expect(text).toMatch(/node_types\.full: Unrecognized key\(s\) in object: 'instance_typ'/)
    expect(text).toMatch(/durations\.1y: Invalid enum value/)
    expect(text).toMatch(/releases\[0\]\.sha256: must be a lowercase hex SHA-256/)
    expect(text).toMatch(/config_files\[0\]\.path: must be a relative path inside the node directory/)
  })

  it('checks the release list, the default version, the folder name and built-in variables', async () => {
    const dir = configDirWith(
      (yaml) =>
        replaceOnce(
          replaceOnce(replaceOnce(yaml, 'default_version: "1.0.0"', 'default_version: "2.0.0"'), '  - version: "1.1.0"', '  - version: "1.0.0"'),
          'archive: "false"',
          'rpc_port: "1"',
        ),
      'devnet-copy',
    )
    const text = (await problemsOf(dir)).join('\n')
    expect(text).toMatch(/chains\/devnet-copy\/profile\.yaml: releases\[1\]\.version: 1\.0\.0 is listed twice/)
    expect(text).toMatch(/default_version: 2\.0\.0 is not one of the releases/)
    expect(text).toMatch(/node_types\.full\.vars\.rpc_port: rpc_port is a built-in variable/)

    const renamed = configDirWith((y) => y, 'devnet-two')
    expect((await problemsOf(renamed)).join('\n')).toMatch(/chains\/devnet-two\/profile\.yaml: id: "devnet" must match its folder name "devnet-two"/)
  })

  it('asks for quoted versions, config files inside config/ and reports YAML syntax errors', async () => {
    const unquoted = configDirWith((yaml) => replaceOnce(yaml, 'default_version: "1.0.0"', 'default_version: 1.0'))
    expect((await problemsOf(unquoted)).join('\n')).toMatch(/default_version: must be a string \(quote versions in YAML\)/)

    const outside = configDirWith((yaml) => replaceOnce(yaml, 'path: config/devnet.json', 'path: data/devnet.json'))
    expect((await problemsOf(outside)).join('\n')).toMatch(/config_files\[0\]\.path: must be inside config\//)

    // A chain-generated key lives in the chain's own directories, where a migration can put it back.
    const keyOutside = configDirWith((yaml) => replaceOnce(yaml, 'path: data/nodekey', 'path: agent-key'))
    expect((await problemsOf(keyOutside)).join('\n')).toMatch(/inputs\[\d+\]\.path: must be a file under data\/ or config\/ \(where the chain writes\)/)

    const broken = configDirWith((yaml) => replaceOnce(yaml, 'binary_name: devnet-node', 'binary_name: [devnet-node'))
    expect((await problemsOf(broken))[0]).toMatch(/^chains\/devnet\/profile\.yaml: /)
  })

  it('refuses a release whose artifact does not match its checksum, or is missing', async () => {
    const dir = configDirWith()
    const artifact = path.join(dir, 'chains/devnet/releases/devnet-node-1.1.0.mjs')
    fs.appendFileSync(artifact, '// tampered\n')
    const problems = await problemsOf(dir)
    expect(problems).toHaveLength(1)
    expect(problems[0]).toMatch(
      /^chains\/devnet\/profile\.yaml: releases\[1\]\.sha256: releases\/devnet-node-1\.1\.0\.mjs does not match the checksum \(the file's SHA-256 is [0-9a-f]{64}\)/,
    )

    fs.rmSync(artifact)
    expect((await problemsOf(dir))[0]).toMatch(/releases\[1\]\.artifact: cannot read .*devnet-node-1\.1\.0\.mjs: ENOENT/)
  })

  it('keeps remote artifacts as URLs without reading them', async () => {
    const dir = configDirWith((yaml) =>
      replaceOnce(yaml, 'artifact: releases/devnet-node-1.1.0.mjs', 'artifact: https://downloads.example.com/devnet-node-1.1.0.mjs'),
    )
    const devnet = getProfile(await loadChainCatalogue(dir), 'devnet')
    expect(releaseFor(devnet, '1.1.0').url).toBe('https://downloads.example.com/devnet-node-1.1.0.mjs')
  })

  it('refuses a config dir without chain profiles', async () => {
    const empty = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-chains-'))
    temps.push(empty)
    expect((await problemsOf(empty))[0]).toMatch(/cannot read the chain catalogue/)
    fs.mkdirSync(path.join(empty, 'chains'))
    expect((await problemsOf(empty))[0]).toMatch(/no chain profiles in/)
  })
})
