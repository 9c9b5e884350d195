import * as Flags from '@oclif/core/flags'
import { DATABASE_NAMES, type DatabaseName } from '../db/migrate.js'

export const databaseFlag = Flags.string({
  description: 'which database',
  options: ['control-plane', 'payments', 'all'],
  default: 'all',
})

export function selectedDatabases(value: string): DatabaseName[] {
  return value === 'all' ? [...DATABASE_NAMES] : [value as DatabaseName]
}
