import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { createLogger } from '../../../src/log.js'
import { ensureSecrets, secretsStatus } from '../../../src/secrets/setup.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { LogCapture } from '../http/harness.js'

const cleanups: (() => Promise<void> | void)[] = []
afterEach(async () => {
  while (cleanups.length > 0) await (cleanups.pop() as () => Promise<void> | void)()
})

describe.each(DIALECTS)('ensureSecrets (for `nodeplane up`) on %s', (dialect) => {
  it('creates what is missing once, then reuses it, logging ids but never the key', async () => {
    const t: TestDatabase = await createTestDatabase(dialect)
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-ensure-'))
    cleanups.push(() => t.destroy(), () => fs.rmSync(dir, { recursive: true, force: true }))
    const settings = { NODEPLANE_DATA_DIR: dir, SECRETS_PROVIDER: 'local' as const }
    const logs = new LogCapture()
    const logger = createLogger({ destination: logs, level: 'debug' })

    const first = await ensureSecrets(t.db, settings, logger)
    expect(first).toMatchObject({ masterKeyCreated: true, serverKeyCreated: true })
    const second = await ensureSecrets(t.db, settings, logger)
    expect(second).toMatchObject({ masterKeyCreated: false, serverKeyCreated: false, serverKey: first.serverKey })
    expect(second.masterKey.id).toBe(first.masterKey.id)
    expect(fs.statSync(path.join(dir, 'master.key')).mode & 0o777).toBe(0o600)

    expect(logs.lines.map((l) => l.msg)).toEqual(['created the master key file', 'created the server X25519 key pair'])
    const key = fs.readFileSync(path.join(dir, 'master.key'), 'utf8').trim()
    expect(logs.text()).not.toContain(key)
    expect(logs.text()).not.toContain(Buffer.from(key, 'base64').toString('hex'))

    expect(await secretsStatus(t.db, settings)).toMatchObject({ ready: true, master_key_id: first.masterKey.id, active_server_key_id: first.serverKey.key_id })
  })
})
