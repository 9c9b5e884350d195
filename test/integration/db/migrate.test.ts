/**
 * `nodeplane db migrate` is idempotent and safe when two processes run it at once (spec 000,
 * Versioning: "Database migrations run as a separate step before services start and are
 * idempotent"), on both databases and both dialects.
 */
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { createDatabase, type Db } from '../../../src/db/knex.js'
import { DATABASE_NAMES, migrateLatest, migrationStatus, type DatabaseName } from '../../../src/db/migrate.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../../helpers/db.js'
import { MIGRATIONS, migratorConfig, schemaSnapshot, tableNames } from './support.js'

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')
const CHILD = path.join(REPO_ROOT, 'test/integration/db/migrate-child.ts')

async function migrationRows(db: Db, name: DatabaseName): Promise<Array<{ name: string; batch: number }>> {
  const rows = (await db(MIGRATIONS[name].tableName).select('name', 'batch').orderBy('id')) as Array<{ name: string; batch: unknown }>
  return rows.map((r) => ({ name: r.name, batch: Number(r.batch) }))
}

/** Fails instead of hanging when a runner waits on a lock nobody will release. */
function within<T>(ms: number, what: string, p: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms)
  })
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer))
}

interface Runner {
  ready: Promise<void>
  go(): void
  done: Promise<{ code: number | null; stdout: string; stderr: string }>
}

function startRunner(url: string, name: DatabaseName): Runner {
  const child = spawn(process.execPath, ['--import', 'tsx', CHILD, url, name], {
    cwd: REPO_ROOT,
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  let stdout = ''
  let stderr = ''
  let markReady: () => void = () => {}
  const ready = new Promise<void>((resolve) => (markReady = resolve))
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    stdout += chunk
    if (stdout.includes('ready\n')) markReady()
  })
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk))
  const done = new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
    child.on('error', reject)
    child.on('close', (code) => {
      markReady()
      resolve({ code, stdout, stderr })
    })
  })
  return { ready, go: () => child.stdin.end('go\n'), done }
}

function appliedBy(stdout: string): string[] {
  const last = stdout.trim().split('\n').at(-1) ?? ''
  return (JSON.parse(last) as { applied: string[] }).applied
}

describe.each(DIALECTS)('migrations on %s', (dialect) => {
  describe.each(DATABASE_NAMES)('%s database', (name) => {
    const expected = MIGRATIONS[name].names

    it('applies every migration to a fresh database once; running it again changes nothing', async () => {
      const t = await createTestDatabase(dialect, { database: name, migrated: false })
      try {
        expect(await tableNames(t.db)).toEqual([])
        expect(await migrationStatus(t.db, name)).toEqual({ database: name, applied: [], pending: expected })

        expect(await migrateLatest(t.db, name)).toEqual({ applied: expected })
        expect(await migrationStatus(t.db, name)).toEqual({ database: name, applied: expected, pending: [] })
        const schema = await schemaSnapshot(t.db)
        const rows = await migrationRows(t.db, name)
        expect(rows).toEqual(expected.map((n) => ({ name: n, batch: 1 })))

        // A second runner (another process's pool, as `db migrate` after a daemon has migrated)
        // must neither wait on a lock the first left behind nor apply anything.
        const again = await within(15_000, 'second migrate', migrateLatest(t.connect(), name))
        expect(again).toEqual({ applied: [] })
        expect(await schemaSnapshot(t.db)).toEqual(schema)
        expect(await migrationRows(t.db, name)).toEqual(rows)
        expect(await migrationStatus(t.db, name)).toEqual({ database: name, applied: expected, pending: [] })
      } finally {
        await t.destroy()
      }
    })

    it('rolls every migration back to an empty database, and migrating again rebuilds the same schema', async () => {
      const t = await createTestDatabase(dialect, { database: name, migrated: false })
      try {
        await migrateLatest(t.db, name)
        const schema = await schemaSnapshot(t.db)

        await t.db.migrate.rollback(migratorConfig(name), true)
        // Only knex's own bookkeeping survives a full rollback.
        const table = MIGRATIONS[name].tableName
        expect(await tableNames(t.db)).toEqual([table, `${table}_lock`].sort())
        expect(await migrationStatus(t.db, name)).toEqual({ database: name, applied: [], pending: expected })

        expect(await migrateLatest(t.db, name)).toEqual({ applied: expected })
        expect(await schemaSnapshot(t.db)).toEqual(schema)
      } finally {
        await t.destroy()
      }
    })

    it('two processes migrating one fresh database at once both succeed and apply each migration once', { timeout: 90_000 }, async () => {
      // Postgres: an empty database; SQLite: a file that does not exist yet.
      let target: TestDatabase | undefined
      let sqliteDir: string | undefined
      let url: string
      if (dialect === 'postgres') {
        target = await createTestDatabase(dialect, { database: name, migrated: false })
        url = target.url
      } else {
        sqliteDir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-concurrent-'))
        url = `sqlite://${path.join(sqliteDir, `${name}.db`)}`
      }
      const reference = await createTestDatabase(dialect, { database: name, migrated: true })
      let db: Db | undefined
      try {
        const runners = [startRunner(url, name), startRunner(url, name)]
        await within(30_000, 'runners starting', Promise.all(runners.map((r) => r.ready)))
        for (const r of runners) r.go()
        const results = await within(60_000, 'concurrent migrate', Promise.all(runners.map((r) => r.done)))

        for (const r of results) expect(r.code, `runner failed:\n${r.stderr}`).toBe(0)
        // The lock serialises them: one applies everything, the other finds nothing to do.
        const applied = results.map((r) => appliedBy(r.stdout))
        expect(applied.sort((a, b) => a.length - b.length)).toEqual([[], expected])

        db = createDatabase(url)
        expect(await migrationRows(db, name)).toEqual(expected.map((n) => ({ name: n, batch: 1 })))
        expect(await migrationStatus(db, name)).toEqual({ database: name, applied: expected, pending: [] })
        expect(await schemaSnapshot(db)).toEqual(await schemaSnapshot(reference.db))
      } finally {
        await db?.destroy()
        await reference.destroy()
        await target?.destroy()
        if (sqliteDir) fs.rmSync(sqliteDir, { recursive: true, force: true })
      }
    })
  })
})
