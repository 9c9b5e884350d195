import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { snapshotState } from '../../../src/node-agent/backup.js'
import { startBackupPruning } from '../../../src/node-agent/backup-pruning.js'
import { createExecutor, type Executor } from '../../../src/node-agent/executor.js'
import { loadOrCreateAgentKey } from '../../../src/node-agent/keys.js'
import { pruneBackups, readActiveDeployment, type StateDir } from '../../../src/node-agent/state-dir.js'
import { ChainSupervisor, isProcessAlive } from '../../../src/node-agent/supervisor.js'
import { seal, type SealedBox } from '../../../src/secrets/sealed-box.js'
import { activateFixture, fileUrl, killAll, removeStateDir, silentLogger, tempStateDir } from '../../fixtures/agent/helpers.js'

const quiet = { progress: () => undefined }
const HOUR = 60 * 60 * 1000

function writeFiles(root: string, files: Record<string, string>): void {
  for (const [rel, content] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(root, rel)), { recursive: true })
    fs.writeFileSync(path.join(root, rel), content)
  }
}

/** Every file under `root`, as bytes. */
function readBytes(root: string): Buffer[] {
  const out: Buffer[] = []
  const walk = (d: string) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name)
      if (e.isDirectory()) walk(p)
      else if (e.isFile()) out.push(fs.readFileSync(p))
    }
  }
  walk(root)
  return out
}

function readTree(root: string): Record<string, string> {
  const out: Record<string, string> = {}
  const walk = (d: string) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name)
      if (e.isDirectory()) walk(p)
      else out[path.relative(root, p)] = fs.readFileSync(p, 'utf8')
    }
  }
  walk(root)
  return out
}

describe('backup and restore', () => {
  const dirs: StateDir[] = []
  const supervisors: ChainSupervisor[] = []
  const pids = new Set<number>()
  let store: string | undefined

  afterEach(async () => {
    await Promise.all(supervisors.splice(0).map((s) => s.close()))
    killAll(pids)
    pids.clear()
    for (const d of dirs.splice(0)) removeStateDir(d)
    if (store) fs.rmSync(store, { recursive: true, force: true })
    store = undefined
  })

  function node(): { dir: StateDir; supervisor: ChainSupervisor; executor: Executor } {
    const dir = tempStateDir()
    dirs.push(dir)
    const supervisor = new ChainSupervisor({ stateDir: dir, logger: silentLogger, settleMs: 100, stopGraceMs: 2_000 })
    supervisors.push(supervisor)
    return { dir, supervisor, executor: createExecutor({ stateDir: dir, supervisor, logger: silentLogger }) }
  }

  function storeUrl(): string {
    store ??= fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-store-'))
    return fileUrl(path.join(store, 'backups'))
  }

  const chainData = { 'chain.json': '{"height":42}\n', nodekey: 'abc\n', 'db/blocks/000001.log': 'block data' }
  // The backup key the control plane derives; each test node gets it sealed to its own agent key.
  const backupKey = crypto.randomBytes(32)
  const sealedFor = (dir: StateDir, key: Uint8Array = backupKey): SealedBox => seal(key, loadOrCreateAgentKey(dir).publicKey)

  it('backs up data/, config/ and active.json, then restores data over changed data with the process stopped', async () => {
    const { dir, supervisor, executor } = node()
    activateFixture(dir, 'sleeper.mjs')
    supervisor.reload()
    writeFiles(dir.dataDir, chainData)
    writeFiles(dir.configDir, { 'node.json': '{"port":1}' })
    const url = storeUrl()

    const backup = (await executor.execute({ id: 'backup-1', type: 'backup', payload: { backup_id: 'b-1', store_url: url, key: sealedFor(dir) } }, quiet)) as Record<string, unknown>
    const activeSize = fs.statSync(dir.activeFile).size
    const dataBytes = Object.values(chainData).reduce((n, c) => n + Buffer.byteLength(c), 0)
    expect(backup).toEqual({
      backup_id: 'b-1',
      location: path.join(store!, 'backups', 'b-1'),
      file_count: 5,
      size_bytes: dataBytes + Buffer.byteLength('{"port":1}') + activeSize,
    })
    // The same files, each encrypted: nothing of their content is in the store.
    expect(Object.keys(readTree(path.join(store!, 'backups', 'b-1', 'data'))).sort()).toEqual(Object.keys(chainData).sort())
    for (const bytes of readBytes(path.join(store!, 'backups', 'b-1'))) {
      for (const content of [...Object.values(chainData), '{"port":1}']) expect(bytes.includes(Buffer.from(content))).toBe(false)
    }

    // The chain moves on, then the node is restored while running.
    await supervisor.start()
    const pid = supervisor.status().pid!
    pids.add(pid)
    writeFiles(dir.dataDir, { 'chain.json': '{"height":99}\n', 'db/blocks/000002.log': 'newer block' })
    writeFiles(dir.configDir, { 'node.json': '{"port":2}' })
    const restore = await executor.execute({ id: 'restore-1', type: 'restore', payload: { backup_id: 'b-1', store_url: url, key: sealedFor(dir) } }, quiet)
    expect(restore).toEqual({ backup_id: 'b-1', restored: ['data'], file_count: 3, size_bytes: dataBytes })
    expect(readTree(dir.dataDir)).toEqual(chainData)
    // A configured node keeps its own configuration; restore does not start the process.
    expect(readTree(dir.configDir)).toEqual({ 'node.json': '{"port":2}' })
    expect(isProcessAlive(pid)).toBe(false)
    expect(supervisor.status().process_state).toBe('stopped')
  })

  it('restores config/ and active.json too onto an unconfigured node', async () => {
    const source = node()
    activateFixture(source.dir, 'sleeper.mjs', { version: '2.0.0' })
    writeFiles(source.dir.dataDir, chainData)
    writeFiles(source.dir.configDir, { 'node.json': '{"port":1}' })
    const url = storeUrl()
    await source.executor.execute({ id: 'backup-1', type: 'backup', payload: { backup_id: 'b-1', store_url: url, key: sealedFor(source.dir) } }, quiet)

    const target = node()
    const restore = await target.executor.execute({ id: 'restore-1', type: 'restore', payload: { backup_id: 'b-1', store_url: url, key: sealedFor(target.dir) } }, quiet)
    expect(restore).toMatchObject({ restored: ['data', 'config', 'active.json'], file_count: 5 })
    expect(readTree(target.dir.dataDir)).toEqual(chainData)
    expect(readTree(target.dir.configDir)).toEqual({ 'node.json': '{"port":1}' })
    expect(readActiveDeployment(target.dir)?.version).toBe('2.0.0')
    expect(target.supervisor.status()).toMatchObject({ process_state: 'stopped', version: '2.0.0' })
  })

  it('fails clearly for a missing backup and leaves the data alone', async () => {
    const { dir, executor } = node()
    writeFiles(dir.dataDir, chainData)
    const url = storeUrl()
    await expect(executor.execute({ id: 'restore-1', type: 'restore', payload: { backup_id: 'nope', store_url: url, key: sealedFor(dir) } }, quiet)).rejects.toThrow(
      `backup nope not found in ${path.join(store!, 'backups')}`,
    )
    await expect(executor.execute({ id: 'restore-2', type: 'restore', payload: { backup_id: 'nope', store_url: 'https://example.com/x', key: sealedFor(dir) } }, quiet)).rejects.toThrow(
      /store_url: only file:\/\/ stores are supported/,
    )
    expect(readTree(dir.dataDir)).toEqual(chainData)
  })

  it('refuses a restore under another key, from another backup id, or of a plaintext snapshot, and leaves the running chain and its data alone', async () => {
    const source = node()
    writeFiles(source.dir.dataDir, chainData)
    const url = storeUrl()
    await source.executor.execute({ id: 'backup-1', type: 'backup', payload: { backup_id: 'b-1', store_url: url, key: sealedFor(source.dir) } }, quiet)

    const { dir, supervisor, executor } = node()
    activateFixture(dir, 'sleeper.mjs')
    supervisor.reload()
    const own = { 'chain.json': '{"height":7}\n' }
    writeFiles(dir.dataDir, own)
    await supervisor.start()
    const pid = supervisor.status().pid!
    pids.add(pid)
    // Another node's backup key (another data key) does not open this backup.
    await expect(
      executor.execute({ id: 'restore-1', type: 'restore', payload: { backup_id: 'b-1', store_url: url, key: sealedFor(dir, crypto.randomBytes(32)) } }, quiet),
    ).rejects.toThrow(/does not authenticate under the backup key/)
    // The right key, but the snapshot moved under another backup id: bound to its id, it does not decrypt.
    fs.cpSync(path.join(store!, 'backups', 'b-1'), path.join(store!, 'backups', 'b-2'), { recursive: true })
    await expect(executor.execute({ id: 'restore-2', type: 'restore', payload: { backup_id: 'b-2', store_url: url, key: sealedFor(dir) } }, quiet)).rejects.toThrow(
      /does not authenticate under the backup key/,
    )
    // A key sealed to another agent does not open here.
    await expect(
      executor.execute({ id: 'restore-3', type: 'restore', payload: { backup_id: 'b-1', store_url: url, key: sealedFor(source.dir) } }, quiet),
    ).rejects.toThrow(/the backup key: .*sealed to this agent's public key/)
    // A plaintext snapshot (as written before backups were encrypted) is not restored.
    await snapshotState(source.dir, path.join(store!, 'backups', 'b-plain'), new Date())
    await expect(executor.execute({ id: 'restore-4', type: 'restore', payload: { backup_id: 'b-plain', store_url: url, key: sealedFor(dir) } }, quiet)).rejects.toThrow(
      /is not encrypted/,
    )
    expect(readTree(dir.dataDir)).toEqual(own)
    expect(isProcessAlive(pid)).toBe(true)
    expect(fs.readdirSync(dir.root).filter((n) => n.startsWith('.restore-'))).toEqual([])
  })

  it('prunes upgrade backups once they are 24 hours old (injected clock)', async () => {
    const { dir } = node()
    const t0 = new Date('2026-03-01T00:00:00Z')
    await snapshotState(dir, path.join(dir.backupsDir, 'upgrade-old'), t0)
    await snapshotState(dir, path.join(dir.backupsDir, 'upgrade-new'), new Date(t0.getTime() + 2 * HOUR))
    expect(await pruneBackups(dir, new Date(t0.getTime() + 24 * HOUR - 1))).toEqual([])
    expect(await pruneBackups(dir, new Date(t0.getTime() + 24 * HOUR))).toEqual(['upgrade-old'])
    expect(fs.readdirSync(dir.backupsDir)).toEqual(['upgrade-new'])
    expect(await pruneBackups(dir, new Date(t0.getTime() + 26 * HOUR))).toEqual(['upgrade-new'])
  })

  it('prunes them on a timer too, at start and every interval, without waiting for the next upgrade (moved clock)', async () => {
    const { dir } = node()
    const t0 = new Date('2026-03-01T00:00:00Z')
    let clock = new Date(t0.getTime() + 25 * HOUR)
    await snapshotState(dir, path.join(dir.backupsDir, 'upgrade-stale'), t0)
    await snapshotState(dir, path.join(dir.backupsDir, 'upgrade-recent'), new Date(t0.getTime() + 20 * HOUR))
    const pruning = startBackupPruning({ stateDir: dir, logger: silentLogger, now: () => clock, intervalMs: 20 })
    try {
      const gone = async (name: string) => {
        const deadline = Date.now() + 5_000
        while (fs.readdirSync(dir.backupsDir).includes(name) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10))
        return !fs.readdirSync(dir.backupsDir).includes(name)
      }
      // At start: the one past 24 h goes, the other stays.
      expect(await gone('upgrade-stale')).toBe(true)
      expect(fs.readdirSync(dir.backupsDir)).toEqual(['upgrade-recent'])
      // No upgrade happens; once the clock passes its 24 h the timer deletes it.
      clock = new Date(t0.getTime() + 44 * HOUR)
      expect(await gone('upgrade-recent')).toBe(true)
      expect(fs.readdirSync(dir.backupsDir)).toEqual([])
    } finally {
      await pruning.stop()
    }
  })
})
