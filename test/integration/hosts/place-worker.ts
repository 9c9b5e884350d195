/**
 * A separate process placing nodes at once through its own connection pool (placement.test.ts):
 * `place-worker.ts <database url> <node id>...` prints the fleet host id (or null) per node as
 * JSON. Two of these at the same time are two orchestrators placing into one fleet.
 */
import { createDatabase } from '../../../src/db/knex.js'
import { DEFAULT_INSTANCE_TYPES } from '../../../src/hosts/instance-types.js'
import { placeNode } from '../../../src/hosts/placement.js'

const [url, ...nodeIds] = process.argv.slice(2)
const db = createDatabase(url as string)
try {
  const needs = DEFAULT_INSTANCE_TYPES['ssh.small']
  if (!needs) throw new Error('no ssh.small')
  const placed = await Promise.all(nodeIds.map((nodeId) => placeNode(db, { hostKey: nodeId, nodeId, region: 'eu-1', instanceType: 'ssh.small', needs })))
  process.stdout.write(`${JSON.stringify(placed.map((p) => p?.host.id ?? null))}\n`)
} finally {
  await db.destroy()
}
