/** `nodeplane secrets …` through the built binary (`npm run build` first), on both databases. */
import fs from 'node:fs'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { LocalFileMasterKey } from '../../../src/secrets/master-key.js'
import { activeServerPublicKey, listServerKeys } from '../../../src/secrets/server-key.js'
import { nodeplane, tempDir } from '../../helpers/cli.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'

const cleanups: (() => Promise<void> | void)[] = []
afterEach(async () => {
  while (cleanups.length > 0) await (cleanups.pop() as () => Promise<void> | void)()
})

async function setup(dialect: (typeof DIALECTS)[number]): Promise<{ t: TestDatabase; dir: string; env: Record<string, string> }> {
  const t = await createTestDatabase(dialect)
  const dir = tempDir('nodeplane-secrets-')
  cleanups.push(() => t.destroy(), () => fs.rmSync(dir, { recursive: true, force: true }))
  return { t, dir, env: { NODEPLANE_DATA_DIR: dir, DATABASE_URL: t.url } }
}

describe.each(DIALECTS)('nodeplane secrets on %s', (dialect) => {
  it('init creates the key file (0600) and a server key once; a second init is exit 4 and changes nothing', async () => {
    const { t, dir, env } = await setup(dialect)
    const file = path.join(dir, 'master.key')

    const before = await nodeplane(['secrets', 'status', '--check', '--json'], { env })
    expect(before.exitCode).toBe(1)
    expect(JSON.parse(before.stdout)).toMatchObject({ master_key_file: file, master_key_file_present: false, ready: false, active_server_key_id: null })
    expect(JSON.parse(before.stdout).problem).toContain('nodeplane secrets init')

    const first = await nodeplane(['secrets', 'init', '--json'], { env })
    expect(first.exitCode, first.stderr).toBe(0)
    const result = JSON.parse(first.stdout) as { master_key_file: string; master_key_id: string; server_key: { key_id: string; public_key: string; algorithm: string } }
    expect(result.master_key_file).toBe(file)
    expect(fs.statSync(file).mode & 0o777).toBe(0o600)
    const masterKey = await LocalFileMasterKey.load(file)
    expect(result.master_key_id).toBe(masterKey.id)
    expect(await activeServerPublicKey(t.db)).toEqual(result.server_key)
    expect((await listServerKeys(t.db)).map((k) => k.master_key_id)).toEqual([masterKey.id])
    const keyText = fs.readFileSync(file, 'utf8').trim()

    const second = await nodeplane(['secrets', 'init'], { env })
    expect(second.exitCode).toBe(4)
    expect(second.stderr).toContain(`the master key file ${file} already exists`)
    expect(second.stderr.trim().split('\n')).toHaveLength(2)
    const secondJson = await nodeplane(['secrets', 'init', '--json'], { env })
    expect(secondJson.exitCode).toBe(4)
    expect(JSON.parse(secondJson.stdout)).toMatchObject({ error: { name: 'ConflictError', exit_code: 4 } })
    expect(fs.readFileSync(file, 'utf8').trim()).toBe(keyText)
    expect(await listServerKeys(t.db)).toHaveLength(1)

    const status = await nodeplane(['secrets', 'status', '--check', '--json'], { env })
    expect(status.exitCode).toBe(0)
    expect(JSON.parse(status.stdout)).toMatchObject({ master_key_ok: true, master_key_id: masterKey.id, active_server_key_id: result.server_key.key_id, ready: true, problem: null })

    const rotated = await nodeplane(['secrets', 'rotate-server-key', '--yes', '--json'], { env })
    expect(rotated.exitCode).toBe(0)
    expect(JSON.parse(rotated.stdout)).toMatchObject({ retired: [result.server_key.key_id] })

    // The key never reaches any output.
    for (const out of [before, first, second, secondJson, status, rotated]) {
      expect(out.stdout + out.stderr).not.toContain(keyText)
      expect(out.stdout + out.stderr).not.toContain(Buffer.from(keyText, 'base64').toString('hex'))
    }
  })

  it('refuses a key file others can read, naming the file and chmod 600', async () => {
    const { dir, env } = await setup(dialect)
    const file = path.join(dir, 'custom', 'np-master.key')
    const withFile = { ...env, SECRETS_MASTER_KEY_FILE: file }
    expect((await nodeplane(['secrets', 'init'], { env: withFile })).exitCode).toBe(0)
    expect(fs.existsSync(path.join(dir, 'master.key'))).toBe(false)
    fs.chmodSync(file, 0o644)

    const status = await nodeplane(['secrets', 'status', '--check', '--json'], { env: withFile })
    expect(status.exitCode).toBe(1)
    expect(JSON.parse(status.stdout)).toMatchObject({ master_key_file_present: true, master_key_ok: false, ready: false })
    expect(JSON.parse(status.stdout).problem).toContain(`chmod 600 ${file}`)

    const rotate = await nodeplane(['secrets', 'rotate-server-key'], { env: withFile })
    expect(rotate.exitCode).toBe(78)
    expect(rotate.stderr).toContain(`chmod 600 ${file}`)
  })

  it('after a lost key file, init makes a new key and a new server key pair the old key cannot have wrapped', async () => {
    const { t, dir, env } = await setup(dialect)
    const first = JSON.parse((await nodeplane(['secrets', 'init', '--json'], { env })).stdout) as { master_key_id: string; server_key: { key_id: string } }
    fs.rmSync(path.join(dir, 'master.key'))
    const again = await nodeplane(['secrets', 'init', '--json'], { env })
    expect(again.exitCode).toBe(0)
    const second = JSON.parse(again.stdout) as { master_key_id: string; server_key: { key_id: string } }
    expect(second.master_key_id).not.toBe(first.master_key_id)
    expect(second.server_key.key_id).not.toBe(first.server_key.key_id)
    const keys = await listServerKeys(t.db)
    expect(keys.map((k) => [k.key_id, k.master_key_id, k.retired_at === null])).toEqual([
      [second.server_key.key_id, second.master_key_id, true],
      [first.server_key.key_id, first.master_key_id, false],
    ])
    const status = JSON.parse((await nodeplane(['secrets', 'status', '--json'], { env })).stdout)
    expect(status).toMatchObject({ ready: true, server_keys_wrapped_by_other_master_keys: 1 })
  })
})
