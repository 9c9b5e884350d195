import fs from 'node:fs'
import path from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { execa } from 'execa'
import { createTestDatabase, DIALECTS } from '../helpers/db.js'
import { BIN, cleanEnv, nodeplane, tempDir } from '../helpers/cli.js'
import { controlPlaneMigrations } from '../../migrations/control-plane/index.js'
import { paymentsMigrations } from '../../migrations/payments/index.js'

// Every released migration, in order (the indexes are the source of truth; a new one joins them).
const CONTROL_PLANE = controlPlaneMigrations.map((m) => m.name)
const PAYMENTS = paymentsMigrations.map((m) => m.name)

const dirs: string[] = []
afterAll(() => dirs.forEach((d) => fs.rmSync(d, { recursive: true, force: true })))

describe.each(DIALECTS)('nodeplane db migrate / db status on %s', (dialect) => {
  it('migrates every database once, reports up to date the second time, and --check tells pending from current', async () => {
    const cp = await createTestDatabase(dialect, { migrated: false })
    const payments = await createTestDatabase(dialect, { database: 'payments', migrated: false })
    const env = { DATABASE_URL: cp.url, PAYMENTS_DATABASE_URL: payments.url }
    try {
      const pending = await nodeplane(['db', 'status', '--check', '--json'], { env })
      expect(pending.exitCode).toBe(1)
      expect(JSON.parse(pending.stdout)).toMatchObject({ up_to_date: false, databases: [{ database: 'control-plane', applied: [], pending: CONTROL_PLANE }, { database: 'payments' }] })

      const first = await nodeplane(['db', 'migrate', '--json'], { env })
      expect(first.exitCode).toBe(0)
      expect(JSON.parse(first.stdout).databases.map((d: { applied: string[] }) => d.applied)).toEqual([CONTROL_PLANE, PAYMENTS])

      const second = await nodeplane(['db', 'migrate', '--database', 'payments'], { env })
      expect(second.exitCode).toBe(0)
      expect(second.stdout).toMatch(/^payments: already up to date/)

      const current = await nodeplane(['db', 'status', '--check', '--json'], { env })
      expect(current.exitCode).toBe(0)
      expect(JSON.parse(current.stdout)).toMatchObject({ up_to_date: true, databases: [{ dialect, pending: [] }, { dialect, pending: [] }] })
    } finally {
      await cp.destroy()
      await payments.destroy()
    }
  })
})

describe('CLI contract', () => {
  it('answers a bad flag value with exit 2 and one line naming the allowed values', async () => {
    const result = await nodeplane(['db', 'migrate', '--database', 'everything'])
    expect(result.exitCode).toBe(2)
    expect(result.stderr).toContain('Expected --database=everything to be one of: control-plane, payments, all')
  })

  it('puts errors in the JSON document with --json', async () => {
    const result = await nodeplane(['db', 'status', '--json'], { env: { DATABASE_URL: 'sqlite://' } })
    expect(result.exitCode).toBe(78)
    expect(JSON.parse(result.stdout)).toEqual({
      error: { name: 'ConfigError', message: expect.stringContaining('DATABASE_URL'), details: expect.any(String), exit_code: 78 },
    })
  })

  it('lists the topics and commands in --help, and every command has an example', async () => {
    const help = await nodeplane(['--help'])
    expect(help.exitCode).toBe(0)
    for (const word of ['db', 'daemon', 'up']) expect(help.stdout).toMatch(new RegExp(`^\\s+${word}\\s`, 'm'))
    for (const command of [['db', 'migrate'], ['db', 'status'], ['daemon', 'api-server'], ['up']]) {
      const own = await nodeplane([...command, '--help'])
      expect(own.stdout).toContain('EXAMPLES')
      expect(own.stdout).toContain('--json')
      expect(own.stdout).toContain('--data-dir')
    }
  })

  it('bin/dev.js runs the TypeScript sources from any working directory', async () => {
    const dir = tempDir()
    dirs.push(dir)
    const result = await execa('node', [path.join(path.dirname(BIN), 'dev.js'), 'db', 'migrate', '--json'], {
      cwd: dir,
      env: cleanEnv(),
      extendEnv: false,
      reject: false,
    })
    expect(result.exitCode).toBe(0)
    expect(JSON.parse(String(result.stdout)).databases).toHaveLength(2)
    expect(fs.existsSync(path.join(dir, '.nodeplane', 'control-plane.db'))).toBe(true)
  })
})
