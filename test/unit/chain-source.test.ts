import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterEach, describe, expect, it } from 'vitest'
import { openChainCatalogue, staticChainSource, type ChainCatalogueSource } from '../../src/config/chain-source.js'
import { getProfile, loadChainCatalogue } from '../../src/config/chains.js'
import { ConfigError } from '../../src/errors.js'
import { LogCapture } from '../integration/http/harness.js'
import { createLogger } from '../../src/log.js'

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const temps: string[] = []
const sources: ChainCatalogueSource[] = []

afterEach(() => {
  for (const source of sources.splice(0)) source.close()
  for (const dir of temps.splice(0)) fs.rmSync(dir, { recursive: true, force: true })
})

/** A config dir with the devnet chain in `chains/` (latest) and in each of `pinned` tags. */
function configDir(pinned: string[] = []): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-chain-source-'))
  temps.push(dir)
  fs.cpSync(path.join(repoRoot, 'chains', 'devnet'), path.join(dir, 'chains', 'devnet'), { recursive: true })
  for (const tag of pinned) fs.cpSync(path.join(repoRoot, 'chains', 'devnet'), path.join(dir, 'chain-catalogue', tag, 'devnet'), { recursive: true })
  return dir
}

function editProfile(file: string, edit: (yaml: string) => string): void {
  const next = edit(fs.readFileSync(file, 'utf8'))
  fs.writeFileSync(file, next)
}

const latestProfile = (dir: string) => path.join(dir, 'chains', 'devnet', 'profile.yaml')
const rename = (name: string) => (yaml: string) => yaml.replace(/^name: .*$/m, `name: ${name}`)

async function open(dir: string, version = 'latest', checkIntervalMs = 0) {
  const logs = new LogCapture()
  const source = await openChainCatalogue({ configDir: dir, version, checkIntervalMs, logger: createLogger({ destination: logs, level: 'debug' }) })
  sources.push(source)
  return { source, logs, warnings: () => logs.lines.filter((l) => l.level === 'warn') }
}

describe('the chain catalogue source, latest', () => {
  it('swaps to a changed catalogue on reload, and the version follows the content', async () => {
    const dir = configDir()
    const { source } = await open(dir)
    const before = source.current()
    expect(source.version).toMatch(/^sha256:[0-9a-f]{16}$/)
    expect(before.version).toBe(source.version)

    editProfile(latestProfile(dir), rename('Devnet renamed'))
    expect(await source.reload()).toBe(true)
    const after = source.current()
    expect(after).not.toBe(before)
    expect(getProfile(after, 'devnet').name).toBe('Devnet renamed')
    expect(after.version).not.toBe(before.version)
    expect(source.version).toBe(after.version)
    // The catalogue a caller held before stays whole: the swap replaced the reference, not its contents.
    expect(getProfile(before, 'devnet').name).not.toBe('Devnet renamed')
  })

  it('does not swap when the content is unchanged (same hash)', async () => {
    const dir = configDir()
    const { source } = await open(dir)
    const before = source.current()
    // Rewriting the same bytes changes the file's time, not its content.
    editProfile(latestProfile(dir), (y) => y)
    expect(await source.reload()).toBe(false)
    expect(source.current()).toBe(before)
  })

  it('keeps the old catalogue when the new one is broken, with one warning naming the problems', async () => {
    const dir = configDir()
    const { source, warnings } = await open(dir)
    const before = source.current()
    editProfile(latestProfile(dir), (y) => y.replace(/^default_version: .*$/m, 'default_version: "9.9.9"'))

    expect(await source.reload()).toBe(false)
    expect(source.current()).toBe(before)
    expect(warnings()).toHaveLength(1)
    const line = warnings()[0] as { msg: string; kept: string; problems: string[] }
    expect(line.msg).toContain('chains/devnet/profile.yaml: default_version: 9.9.9 is not one of the releases')
    expect(line.kept).toBe(before.version)
    expect(line.problems).toHaveLength(1)

    // The same broken content is not reported again on the next check.
    expect(await source.reload()).toBe(false)
    expect(warnings()).toHaveLength(1)

    // Fixed (to something new): swapped in.
    editProfile(latestProfile(dir), (y) => rename('Devnet fixed')(y.replace(/^default_version: .*$/m, `default_version: "${before.profiles.get('devnet')?.default_version ?? ''}"`)))
    expect(await source.reload()).toBe(true)
    expect(getProfile(source.current(), 'devnet').name).toBe('Devnet fixed')
  })

  it('keeps the old catalogue when the folder disappears', async () => {
    const dir = configDir()
    const { source, warnings } = await open(dir)
    const before = source.current()
    fs.rmSync(path.join(dir, 'chains'), { recursive: true })
    expect(await source.reload()).toBe(false)
    expect(source.current()).toBe(before)
    expect(warnings()).toHaveLength(1)
  })

  it('polls on its own at the check interval', async () => {
    const dir = configDir()
    const { source } = await open(dir, 'latest', 5)
    const before = source.version
    editProfile(latestProfile(dir), rename('Devnet polled'))
    await expect.poll(() => source.version, { timeout: 5_000, interval: 5 }).not.toBe(before)
    expect(getProfile(source.current(), 'devnet').name).toBe('Devnet polled')
  })

  it('concurrent reloads share one check', async () => {
    const dir = configDir()
    const { source, logs } = await open(dir)
    editProfile(latestProfile(dir), rename('Devnet once'))
    expect(await Promise.all([source.reload(), source.reload(), source.reload()])).toEqual([true, true, true])
    expect(logs.lines.filter((l) => l.msg === 'chain catalogue changed')).toHaveLength(1)
  })
})

describe('the chain catalogue source, pinned', () => {
  it('loads chain-catalogue/<tag>/ once and never changes', async () => {
    const dir = configDir(['2025-01'])
    const { source } = await open(dir, '2025-01', 5)
    const pinned = source.current()
    expect(source.version).toBe('2025-01')
    expect(pinned.version).toBe('2025-01')
    editProfile(path.join(dir, 'chain-catalogue', '2025-01', 'devnet', 'profile.yaml'), rename('Devnet edited'))
    editProfile(latestProfile(dir), rename('Devnet latest'))
    expect(await source.reload()).toBe(false)
    await new Promise((resolve) => setTimeout(resolve, 30))
    expect(source.current()).toBe(pinned)
    expect(getProfile(source.current(), 'devnet').name).not.toBe('Devnet edited')
  })

  it('refuses an unknown tag at start-up, naming it and the tags that exist', async () => {
    const dir = configDir(['v1', 'v2'])
    const error = await open(dir, 'v3').then(
      () => undefined,
      (err: unknown) => err,
    )
    expect(error).toBeInstanceOf(ConfigError)
    const message = (error as ConfigError).problems.join('\n')
    expect(message).toContain('CHAIN_PROFILE_VERSION="v3"')
    expect(message).toContain('v1, v2')
    const traversal = await open(dir, '../chains').then(
      () => undefined,
      (err: unknown) => err,
    )
    expect(traversal).toBeInstanceOf(ConfigError)
  })

  it('refuses a broken catalogue at start-up', async () => {
    const dir = configDir()
    editProfile(latestProfile(dir), (y) => y.replace(/^default_version: .*$/m, 'default_version: "9.9.9"'))
    await expect(open(dir)).rejects.toBeInstanceOf(ConfigError)
  })
})

describe('staticChainSource', () => {
  it('answers the catalogue it was given', async () => {
    const catalogue = await loadChainCatalogue(repoRoot)
    const source = staticChainSource(catalogue)
    expect(source.current()).toBe(catalogue)
    expect(source.version).toBe(catalogue.version)
    expect(await source.reload()).toBe(false)
  })
})
