import { describe, expect, it } from 'vitest'
import { createTestDatabase, DIALECTS } from '../../helpers/db.js'
import { migrationStatus } from '../../../src/db/migrate.js'

describe.each(DIALECTS)('smoke on %s', (dialect) => {
  it('migrates', async () => {
    const t = await createTestDatabase(dialect)
    try {
      const s = await migrationStatus(t.db, 'control-plane')
      expect(s.pending).toEqual([])
      expect(s.applied).toEqual(['0001_initial_schema'])
    } finally {
      await t.destroy()
    }
  })
})
