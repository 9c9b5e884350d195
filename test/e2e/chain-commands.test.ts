import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { StackFile } from '../../src/daemon/stack-file.js'
import { nodeplane, spawnNodeplane, tempDir, upPorts, waitForFile, type CliResult } from '../helpers/cli.js'

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')

interface Catalogue {
  version: string
  chains: Array<{ id: string; name: string; versions: string[]; [key: string]: unknown }>
}

/** `chain list` against a `nodeplane up` whose config dir is a copy of the devnet chain, checked every 200 ms. */
describe('chain commands (against nodeplane up)', () => {
  let dir: string
  let profile: string
  let up: ReturnType<typeof spawnNodeplane>

  const run = (args: string[]): Promise<CliResult> => nodeplane(args, { cwd: dir })
  const list = async (): Promise<Catalogue> => {
    const result = await run(['chain', 'list', '--json'])
    expect(result.exitCode, result.stderr).toBe(0)
    return JSON.parse(result.stdout) as Catalogue
  }

  beforeAll(async () => {
    dir = fs.realpathSync(tempDir())
    const configDir = path.join(dir, 'config')
    fs.cpSync(path.join(repoRoot, 'chains', 'devnet'), path.join(configDir, 'chains', 'devnet'), { recursive: true })
    // A config dir is the deployment's whole configuration: the payment service in `up` reads its pricing there.
    fs.copyFileSync(path.join(repoRoot, 'pricing.yaml'), path.join(configDir, 'pricing.yaml'))
    profile = path.join(configDir, 'chains', 'devnet', 'profile.yaml')
    // A release whose binary an optional npm dependency would install, absent here: unavailable.
    fs.writeFileSync(
      profile,
      fs.readFileSync(profile, 'utf8').replace(/^releases:\n/m, `releases:\n  - version: "2.0.0"\n    artifact: releases/devnet-node-2.0.0.mjs\n    sha256: ${'ab'.repeat(32)}\n    npm_package: devnet-node-2\n`),
    )
    up = spawnNodeplane(['up'], { cwd: dir, env: { ...(await upPorts()), NODEPLANE_CONFIG_DIR: configDir, CHAINS_CHECK_INTERVAL: '200ms' } })
    await waitForFile<StackFile>(path.join(dir, '.nodeplane', 'stack.json'), 'stack.json')
  })

  afterAll(async () => {
    up?.kill('SIGTERM')
    if (up) expect((await up).exitCode).toBe(143)
    if (dir) fs.rmSync(dir, { recursive: true, force: true })
  })

  it('lists the chains, and shows a changed catalogue after the next check', { timeout: 90_000 }, async () => {
    const first = await list()
    expect(first.version).toMatch(/^sha256:[0-9a-f]{16}$/)
    expect(first.chains.map((c) => c.id)).toEqual(['devnet'])
    expect(first.chains[0]?.versions).toEqual(['2.0.0', '1.0.0', '1.1.0'])
    expect(first.chains[0]?.unavailable_versions).toEqual(['2.0.0'])
    expect(JSON.stringify(first)).not.toMatch(/instance_type|provider|sha256"|file:\/\//)

    const human = await run(['chain', 'list'])
    expect(human.exitCode, human.stderr).toBe(0)
    expect(human.stdout).toContain('devnet')
    const [header, , row] = human.stdout.split('\n')
    expect(header).toMatch(/\bUNAVAILABLE\b/)
    // The unavailable column of devnet's row names 2.0.0.
    expect(row?.slice(header!.indexOf('UNAVAILABLE')).trim()).toMatch(/^2\.0\.0\b/)
    expect(human.stdout).toContain(`catalogue version ${first.version}`)

    fs.writeFileSync(profile, fs.readFileSync(profile, 'utf8').replace(/^name: .*$/m, 'name: Devnet, edited while running'))
    await expect.poll(async () => (await list()).chains[0]?.name, { timeout: 30_000, interval: 300 }).toBe('Devnet, edited while running')
    expect((await list()).version).not.toBe(first.version)
  })
})
