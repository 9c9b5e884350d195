import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { createLogger } from '../../../src/log.js'
import { BACKUP_PURGE_JOB, deleteNodeBackups, scheduleBackupPurge } from '../../../src/provisioning/backup-store.js'
import { createDataKey } from '../../../src/secrets/data-keys.js'
import { LocalFileMasterKey } from '../../../src/secrets/master-key.js'
import { tempDir } from '../../helpers/cli.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { insertTestNode } from '../../helpers/fixtures.js'

const HOUR = 3_600_000
const NEVER = '0 0 0 1 1 *'
const T0 = new Date('2026-05-01T00:00:00.000Z')
const logger = createLogger({ level: 'silent' })

/** A snapshot as the agent's backup command leaves it: `<store>/<id>/` with its manifest. */
function writeBackup(store: string, name: string, createdAt: Date | null): void {
  fs.mkdirSync(path.join(store, name, 'data'), { recursive: true })
  fs.writeFileSync(path.join(store, name, 'data', 'nodekey'), crypto.randomBytes(48))
  if (createdAt) fs.writeFileSync(path.join(store, name, 'manifest.json'), JSON.stringify({ created_at: createdAt.toISOString(), size_bytes: 48, file_count: 1 }))
}

describe.each(DIALECTS)('the backup purge on %s', (dialect) => {
  let t: TestDatabase
  let store: string
  let storeUrl: string
  const masterKey = LocalFileMasterKey.fromBytes(crypto.randomBytes(32))

  beforeEach(async () => {
    t = await createTestDatabase(dialect)
    store = tempDir('nodeplane-backup-store-')
    storeUrl = pathToFileURL(store).href
  })
  afterEach(async () => {
    await t.destroy()
  })

  async function liveNode(): Promise<string> {
    const node = await insertTestNode(t.db)
    ;(await createDataKey(t.db, masterKey, node.id)).destroy()
    return node.id
  }

  it('keeps a backup for 24 hours by its manifest time, then the periodic job deletes it (injected clock)', async () => {
    const [old, fresh, staging] = [await liveNode(), await liveNode(), await liveNode()]
    writeBackup(store, old, T0)
    writeBackup(store, fresh, new Date(T0.getTime() + 2 * HOUR))
    // A staging directory a killed backup left behind: no manifest; its own time counts.
    writeBackup(store, `${staging}.staging-0a1b2c`, null)
    fs.utimesSync(path.join(store, `${staging}.staging-0a1b2c`), T0, T0)
    // Not a node's: never touched.
    fs.mkdirSync(path.join(store, 'lost+found'))
    let clock = new Date(T0.getTime() + 24 * HOUR - 1)
    const job = scheduleBackupPurge({ db: t.db, logger, storeUrl, now: () => clock, cronTime: NEVER })
    try {
      expect(await job.tick()).toBe(true)
      expect(fs.readdirSync(store).sort()).toEqual([fresh, old, `${staging}.staging-0a1b2c`, 'lost+found'].sort())
      clock = new Date(T0.getTime() + 24 * HOUR)
      expect(await job.tick()).toBe(true)
      expect(fs.readdirSync(store).sort()).toEqual([fresh, 'lost+found'].sort())
      clock = new Date(T0.getTime() + 26 * HOUR)
      expect(await job.tick()).toBe(true)
      expect(fs.readdirSync(store)).toEqual(['lost+found'])
    } finally {
      await job.stop()
    }
  })

  it("deletes at once the backup of a node whose keys are gone (a termination whose delete failed): it no longer decrypts", async () => {
    const live = await liveNode()
    const terminated = (await insertTestNode(t.db)).id
    writeBackup(store, live, T0)
    writeBackup(store, terminated, T0)
    const job = scheduleBackupPurge({ db: t.db, logger, storeUrl, now: () => new Date(T0.getTime() + HOUR), cronTime: NEVER })
    try {
      expect(await job.tick()).toBe(true)
      expect(fs.readdirSync(store)).toEqual([live])
    } finally {
      await job.stop()
    }
  })

  it('runs on one orchestrator at a time (database lease)', async () => {
    const node = await liveNode()
    writeBackup(store, node, T0)
    const now = () => new Date(T0.getTime() + 25 * HOUR)
    const a = scheduleBackupPurge({ db: t.db, logger, storeUrl, now, cronTime: NEVER, holder: 'a' })
    const b = scheduleBackupPurge({ db: t.connect(), logger, storeUrl, now, cronTime: NEVER, holder: 'b' })
    try {
      expect((await Promise.all([a.tick(), b.tick()])).filter(Boolean)).toHaveLength(1)
      expect(await t.db('job_leases').where({ name: BACKUP_PURGE_JOB }).first('holder')).toBeDefined()
      expect(fs.readdirSync(store)).toEqual([])
    } finally {
      await a.stop()
      await b.stop()
    }
  })

  it("termination's delete removes the node's snapshot and staging leftovers, no other node's", async () => {
    const [node, other] = [await liveNode(), await liveNode()]
    writeBackup(store, node, T0)
    writeBackup(store, `${node}.staging-ffffff`, null)
    writeBackup(store, other, T0)
    expect((await deleteNodeBackups(storeUrl, node)).sort()).toEqual([node, `${node}.staging-ffffff`])
    expect(fs.readdirSync(store)).toEqual([other])
    expect(await deleteNodeBackups(storeUrl, node)).toEqual([])
  })
})
