import { spawn } from 'node:child_process'
import { afterEach, describe, expect, it } from 'vitest'
import { createTestDatabase, type TestDatabase } from '../../helpers/db.js'

// Another process writing to the same SQLite file (the CLI beside `nodeplane up`, or `up` beside
// the CLI): a transaction that reads and then writes must wait for it, not fail.
describe('SQLite transactions beside another writing process', () => {
  let database: TestDatabase | undefined
  afterEach(async () => {
    await database?.destroy()
    database = undefined
  })

  it('read-then-write transactions all commit while another process writes every few milliseconds', async () => {
    database = await createTestDatabase('sqlite', { migrated: false })
    const { db } = database
    await db.schema.createTable('counters', (t) => {
      t.string('name').primary()
      t.integer('value').notNullable()
    })
    await db('counters').insert([{ name: 'ours', value: 0 }, { name: 'theirs', value: 0 }])
    const file = new URL(database.url.replace(/^sqlite:\/\//, 'file://')).pathname

    // The other process: short write transactions for 3 s, each holding the write lock 2 ms.
    const writer = spawn(
      process.execPath,
      [
        '-e',
        `const db = new (require('better-sqlite3'))(process.argv[1]); db.pragma('busy_timeout = 10000'); db.pragma('journal_mode = WAL')
         const bump = db.prepare("update counters set value = value + 1 where name = 'theirs'")
         const end = Date.now() + 3000; let n = 0
         const tick = () => { if (Date.now() > end) { console.log(n); return db.close() } db.transaction(() => { bump.run(); const t = Date.now(); while (Date.now() - t < 2); })(); n++; setTimeout(tick, 1) }
         tick()`,
        file,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    )
    let written = ''
    writer.stdout.on('data', (chunk: Buffer) => (written += chunk.toString()))
    const exited = new Promise<number | null>((resolve) => writer.on('exit', resolve))

    let committed = 0
    const failures: string[] = []
    while (writer.exitCode === null) {
      try {
        await db.transaction(async (trx) => {
          const row = (await trx('counters').where({ name: 'ours' }).first()) as { value: number }
          await new Promise((resolve) => setTimeout(resolve, 3))
          await trx('counters').where({ name: 'ours' }).update({ value: row.value + 1 })
        })
        committed++
        // Let the other process's busy wait (which backs off up to 100 ms) find the lock free.
        await new Promise((resolve) => setTimeout(resolve, 5))
      } catch (err) {
        failures.push((err as { code?: string }).code ?? String(err))
      }
    }
    expect(await exited).toBe(0)
    expect(failures).toEqual([])
    expect(Number(written.trim())).toBeGreaterThan(20)
    expect(committed).toBeGreaterThan(20)
    // No lost update on our side: every committed read-then-write counted.
    const ours = (await db('counters').where({ name: 'ours' }).first()) as { value: number }
    expect(ours.value).toBe(committed)
  })
})
