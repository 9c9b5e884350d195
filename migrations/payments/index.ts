import type { Migration } from '../../src/db/migrate.js'
import * as initialSchema from './0001_initial_schema.js'
import * as providers from './0002_providers.js'
import * as guards from './0003_guards.js'

/** In order; a released migration is never edited, a change is a new entry. */
export const paymentsMigrations: readonly Migration[] = [initialSchema, providers, guards]
