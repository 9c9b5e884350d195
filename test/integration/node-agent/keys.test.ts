import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { CommandError, createExecutor, type Executor } from '../../../src/node-agent/executor.js'
import { agentPublicKey, captureKeys, injectKeys, loadOrCreateAgentKey } from '../../../src/node-agent/keys.js'
import type { StateDir } from '../../../src/node-agent/state-dir.js'
import { ChainSupervisor } from '../../../src/node-agent/supervisor.js'
import { generateBoxKeyPair, open, seal, type SealedBox } from '../../../src/secrets/sealed-box.js'
import { removeStateDir, silentLogger, tempStateDir } from '../../fixtures/agent/helpers.js'

const modeOf = (file: string) => fs.statSync(file).mode & 0o777
const quiet = { progress: () => undefined }

describe('agent keys', () => {
  let dir: StateDir | undefined
  let supervisor: ChainSupervisor | undefined
  const outside: string[] = []

  afterEach(async () => {
    await supervisor?.close()
    supervisor = undefined
    removeStateDir(dir)
    dir = undefined
    for (const p of outside.splice(0)) fs.rmSync(p, { recursive: true, force: true })
  })

  function node(): { dir: StateDir; executor: Executor; sealToAgent: (text: string) => SealedBox } {
    const stateDir = tempStateDir()
    dir = stateDir
    supervisor = new ChainSupervisor({ stateDir, logger: silentLogger })
    const executor = createExecutor({ stateDir, supervisor, logger: silentLogger })
    const publicKey = Buffer.from(agentPublicKey(stateDir), 'base64')
    return { dir: stateDir, executor, sealToAgent: (text) => seal(Buffer.from(text), publicKey) }
  }

  it('creates the agent key once, mode 0600, and keeps it', () => {
    const { dir } = node()
    expect(modeOf(dir.agentKeyFile)).toBe(0o600)
    const first = loadOrCreateAgentKey(dir)
    const second = loadOrCreateAgentKey(dir)
    expect(Buffer.from(second.publicKey)).toEqual(Buffer.from(first.publicKey))
    expect(agentPublicKey(dir)).toBe(Buffer.from(first.publicKey).toString('base64'))
  })

  it('injects sealed keys into keys/ with mode 0600 in 0700 directories, returning only the paths', async () => {
    const { dir, executor, sealToAgent } = node()
    const result = await executor.execute(
      {
        id: 'inject-1',
        type: 'inject_keys',
        payload: {
          keys: [
            { path: 'validator.key', sealed: sealToAgent('validator secret') },
            { path: 'p2p/node.key', sealed: sealToAgent('p2p secret') },
          ],
        },
      },
      quiet,
    )
    expect(result).toEqual({ paths: ['validator.key', 'p2p/node.key'] })
    expect(JSON.stringify(result)).not.toContain('secret')
    expect(modeOf(dir.keysDir)).toBe(0o700)
    expect(modeOf(path.join(dir.keysDir, 'p2p'))).toBe(0o700)
    expect(modeOf(path.join(dir.keysDir, 'validator.key'))).toBe(0o600)
    expect(modeOf(path.join(dir.keysDir, 'p2p/node.key'))).toBe(0o600)
    expect(fs.readFileSync(path.join(dir.keysDir, 'validator.key'), 'utf8')).toBe('validator secret')
    expect(fs.readFileSync(path.join(dir.keysDir, 'p2p/node.key'), 'utf8')).toBe('p2p secret')
    // The journal records the outcome, never the key material.
    expect(fs.readFileSync(path.join(dir.commandsDir, 'inject-1.json'), 'utf8')).not.toContain('secret')
  })

  it('refuses a box sealed to another key and writes nothing', async () => {
    const { dir, executor, sealToAgent } = node()
    const stranger = generateBoxKeyPair()
    const command = {
      id: 'inject-1',
      type: 'inject_keys',
      payload: {
        keys: [
          { path: 'good.key', sealed: sealToAgent('fine') },
          { path: 'wrong.key', sealed: seal(Buffer.from('not for this agent'), stranger.publicKey) },
        ],
      },
    }
    await expect(executor.execute(command, quiet)).rejects.toThrow(
      /key wrong\.key: sealed box cannot be opened with this key \(wrong recipient or altered\); was it sealed to this agent's public key\?/,
    )
    expect(fs.readdirSync(dir.keysDir)).toEqual([])
  })

  it('rejects key paths that leave keys/, by .. or through a symlink', async () => {
    const { dir, executor, sealToAgent } = node()
    await expect(executor.execute({ id: 'inject-1', type: 'inject_keys', payload: { keys: [{ path: '../active.json', sealed: sealToAgent('x') }] } }, quiet)).rejects.toThrow(
      /invalid inject_keys payload: keys\.0\.path: must be a relative path inside the node directory/,
    )
    await expect(executor.execute({ id: 'inject-2', type: 'inject_keys', payload: { keys: [{ path: '/etc/x', sealed: sealToAgent('x') }] } }, quiet)).rejects.toThrow(
      /keys\.0\.path: must be a relative path/,
    )
    const elsewhere = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-outside-'))
    outside.push(elsewhere)
    fs.symlinkSync(elsewhere, path.join(dir.keysDir, 'escape'))
    const key = loadOrCreateAgentKey(dir)
    expect(() => injectKeys(dir, [{ path: 'escape/stolen.key', sealed: sealToAgent('x') }], key.secretKey)).toThrow(/leads outside .* through a symlink/)
    expect(fs.readdirSync(elsewhere)).toEqual([])
  })

  it('puts a chain-generated key back where the chain keeps it (location state), only under data/ or config/', async () => {
    const { dir, executor, sealToAgent } = node()
    const result = await executor.execute(
      { id: 'inject-1', type: 'inject_keys', payload: { keys: [{ path: 'data/nodekey', location: 'state', sealed: sealToAgent('chain identity') }] } },
      quiet,
    )
    expect(result).toEqual({ paths: ['data/nodekey'] })
    expect(fs.readFileSync(path.join(dir.dataDir, 'nodekey'), 'utf8')).toBe('chain identity')
    expect(modeOf(path.join(dir.dataDir, 'nodekey'))).toBe(0o600)
    expect(fs.existsSync(path.join(dir.keysDir, 'data'))).toBe(false)

    // The agent's own files and directories are not the chain's: refused before anything is written.
    for (const [i, target] of ['agent-key', 'active.json', 'releases/devnet-node', 'commands/x.json', 'data'].entries()) {
      await expect(
        executor.execute({ id: `inject-bad-${i}`, type: 'inject_keys', payload: { keys: [{ path: target, location: 'state', sealed: sealToAgent('x') }] } }, quiet),
        target,
      ).rejects.toThrow(/invalid inject_keys payload: keys\.0\.path: a state key must be under data\/ or config\//)
    }
    const key = loadOrCreateAgentKey(dir)
    expect(() => injectKeys(dir, [{ path: 'data/../agent-key', location: 'state', sealed: sealToAgent('x') }], key.secretKey)).toThrow(/not under the chain's data\/ or config\//)
    expect(fs.readFileSync(dir.agentKeyFile, 'utf8')).not.toBe('x')
  })

  it('captures files sealed to the recipient, waits for one created but not yet written, and names a missing or empty file', async () => {
    const { dir, executor } = node()
    fs.writeFileSync(path.join(dir.dataDir, 'nodekey'), 'chain generated node key\n', { mode: 0o600 })
    const recipient = generateBoxKeyPair()
    const recipientKey = Buffer.from(recipient.publicKey).toString('base64')
    const result = (await executor.execute(
      { id: 'capture-1', type: 'capture_keys', payload: { paths: ['data/nodekey'], recipient_public_key: recipientKey } },
      quiet,
    )) as { keys: Array<{ path: string; sealed: SealedBox }> }
    expect(result.keys.map((k) => k.path)).toEqual(['data/nodekey'])
    expect(Buffer.from(open(result.keys[0]!.sealed, recipient.secretKey)).toString('utf8')).toBe('chain generated node key\n')
    expect(() => open(result.keys[0]!.sealed, loadOrCreateAgentKey(dir).secretKey)).toThrow()

    await expect(
      executor.execute({ id: 'capture-2', type: 'capture_keys', payload: { paths: ['data/nodekey', 'data/missing.key'], recipient_public_key: recipientKey } }, quiet),
    ).rejects.toThrow(new CommandError('key file data/missing.key does not exist on the node'))
    expect(() => captureKeys(dir, ['agent-key'], recipientKey)).toThrow(/agent-key cannot be captured/)

    // A key file the chain has created but not yet written: the capture waits for its content
    // instead of sealing nothing; one that stays empty is refused, naming it.
    const late = path.join(dir.dataDir, 'late.key')
    fs.writeFileSync(late, '', { mode: 0o600 })
    setTimeout(() => fs.writeFileSync(late, 'written a moment later\n'), 300)
    const waited = (await executor.execute({ id: 'capture-3', type: 'capture_keys', payload: { paths: ['data/late.key'], recipient_public_key: recipientKey } }, quiet)) as {
      keys: Array<{ path: string; sealed: SealedBox }>
    }
    expect(Buffer.from(open(waited.keys[0]!.sealed, recipient.secretKey)).toString('utf8')).toBe('written a moment later\n')
    fs.writeFileSync(path.join(dir.dataDir, 'never.key'), '', { mode: 0o600 })
    expect(() => captureKeys(dir, ['data/never.key'], recipientKey)).toThrow(/key file data\/never.key is empty on the node/)
    expect(() => captureKeys(dir, ['data/nodekey'], 'c2hvcnQ=')).toThrow(/recipient_public_key must be a base64 X25519 public key/)
  })
})
