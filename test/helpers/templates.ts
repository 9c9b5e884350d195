import type { DatabaseName } from '../../src/db/migrate.js'

export function templateName(name: DatabaseName): string {
  return `np_template_${name.replace('-', '_')}`
}
