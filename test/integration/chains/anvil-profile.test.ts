/**
 * The ethereum-anvil profile as the catalogue loads it: its releases are the npm aliases in
 * package.json, verified by checksum; without them (another platform, where the optional
 * dependency is skipped) the catalogue still loads and the releases say what to install.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, describe, expect, it } from 'vitest'
import { defaultConfigDir, getProfile, loadChainCatalogue, renderNodeConfig } from '../../../src/config/chains.js'
import { ConfigError, ValidationError } from '../../../src/errors.js'

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')
const dirs: string[] = []
afterAll(() => {
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true })
})

/** A config dir holding a copy of the profile only: its `../../node_modules` is this dir's, empty. */
function configDirWithProfileOnly(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-anvil-profile-'))
  dirs.push(dir)
  fs.cpSync(path.join(repoRoot, 'chains', 'ethereum-anvil'), path.join(dir, 'chains', 'ethereum-anvil'), { recursive: true })
  return dir
}

const sampleNode = { rpc_port: 18545, node_id: '00000000-0000-4000-8000-000000000000' }

describe('the ethereum-anvil profile', () => {
  it('offers the anvil releases package.json installs, each verified against its npm alias', async () => {
    const profile = getProfile(await loadChainCatalogue(defaultConfigDir()), 'ethereum-anvil')
    const optional = (JSON.parse(fs.readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as { optionalDependencies: Record<string, string> }).optionalDependencies
    for (const release of profile.releases) {
      expect(release.unavailable, release.version).toBeUndefined()
      expect(optional[`anvil-${release.version}`]).toBe(`npm:@foundry-rs/anvil-linux-amd64@${release.version}`)
      expect(fileURLToPath(release.url)).toBe(path.join(repoRoot, 'node_modules', `anvil-${release.version}`, 'bin', 'anvil'))
    }
    expect(profile.releases.map((r) => r.version)).toEqual(['1.5.1', '1.7.0', '1.7.1'])
    const config = renderNodeConfig(profile, 'full', sampleNode)
    expect(config.artifact.version).toBe('1.7.1')
    expect(config.run).toMatchObject({ runtime: 'native' })
    const args = config.run.args.join(' ')
    expect(args).toContain('--host 127.0.0.1 --port 18545')
    expect(args).toContain('--state {data_dir}/state.json --state-interval 1')
    expect(config.probe).toMatchObject({ type: 'ethereum_jsonrpc', url: 'http://127.0.0.1:18545' })
  })

  it('without the npm packages the catalogue loads, and configuring a node says what to install', async () => {
    const profile = getProfile(await loadChainCatalogue(configDirWithProfileOnly()), 'ethereum-anvil')
    for (const release of profile.releases) expect(release.unavailable).toMatch(new RegExp(`is not installed \\(npm dependency anvil-${release.version.replace(/\./g, '\\.')},`))
    const refused = (() => {
      try {
        return renderNodeConfig(profile, 'full', sampleNode)
      } catch (err) {
        return err
      }
    })()
    expect(refused).toBeInstanceOf(ValidationError)
    expect((refused as ValidationError).message).toMatch(/^chain ethereum-anvil release 1\.7\.1 cannot be installed: .*node_modules\/anvil-1\.7\.1\/bin\/anvil is not installed \(npm dependency anvil-1\.7\.1/)
  })

  it('refuses the catalogue when an installed anvil is not the build the release pins', async () => {
    const dir = configDirWithProfileOnly()
    const binary = path.join(dir, 'node_modules', 'anvil-1.5.1', 'bin', 'anvil')
    fs.mkdirSync(path.dirname(binary), { recursive: true })
    fs.writeFileSync(binary, '#!/bin/sh\necho not anvil\n', { mode: 0o755 })
    const error = await loadChainCatalogue(dir).catch((err: unknown) => err)
    expect(error).toBeInstanceOf(ConfigError)
    expect((error as ConfigError).problems).toEqual([expect.stringMatching(/^chains\/ethereum-anvil\/profile\.yaml: releases\[0\]\.sha256: \.\.\/\.\.\/node_modules\/anvil-1\.5\.1\/bin\/anvil does not match the checksum/)])
  })
})
