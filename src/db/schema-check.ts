import { UnavailableError } from '../errors.js'
import type { Db } from './knex.js'
import { migrationStatus, type DatabaseName } from './migrate.js'

/** Daemons do not migrate (that is a separate step); they refuse to run on an old schema. */
export async function assertSchemaCurrent(db: Db, name: DatabaseName): Promise<void> {
  const { pending } = await migrationStatus(db, name)
  if (pending.length > 0) {
    throw new UnavailableError(
      `the ${name} database has ${pending.length} pending migration(s): ${pending.join(', ')}`,
      'run `nodeplane db migrate` first',
    )
  }
}
