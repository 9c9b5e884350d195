/**
 * One `db migrate` runner in its own process, for the concurrent-migration test:
 *   node --import tsx migrate-child.ts <database-url> <control-plane|payments>
 * It opens its connection, prints `ready`, waits for a line on stdin (so two runners start
 * migrating at the same instant), migrates, prints the JSON result and exits 0.
 */
import { createDatabase } from '../../../src/db/knex.js'
import { migrateLatest, type DatabaseName } from '../../../src/db/migrate.js'

const [url, name] = process.argv.slice(2)
if (!url || (name !== 'control-plane' && name !== 'payments')) {
  process.stderr.write('usage: migrate-child.ts <database-url> <control-plane|payments>\n')
  process.exit(2)
}

// The pool `nodeplane db migrate` opens: the advisory lock pins one connection, knex uses the other.
const db = createDatabase(url, { poolMax: 2, applicationName: 'nodeplane-migrate' })
try {
  await db.raw('select 1')
  process.stdout.write('ready\n')
  await new Promise<void>((resolve) => process.stdin.once('data', () => resolve()))
  process.stdin.pause()
  const result = await migrateLatest(db, name as DatabaseName)
  process.stdout.write(`${JSON.stringify(result)}\n`)
} finally {
  await db.destroy()
}
