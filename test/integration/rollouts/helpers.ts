/** Shared pieces of the rollout tests: a fixed clock origin and minimal valid rows. */
import type { Db } from '../../../src/db/knex.js'
import { insertRollout, insertRolloutGroup, type NewRollout, type NewRolloutGroup, type RolloutGroupRecord, type RolloutRecord } from '../../../src/rollouts/store.js'

export const T0 = new Date('2025-03-01T12:00:00.000Z')
export const at = (ms: number): Date => new Date(T0.getTime() + ms)

export const CHECKSUM_110 = 'sha256:9479d9205664a5fb6fd2e997c9f2ed3f88aabbddd3837bb1b774bacd5f8ea7ae'

export function newRollout(overrides: Partial<NewRollout> = {}): NewRollout {
  return {
    chain_profile_id: 'devnet',
    node_type: 'full',
    binary_name: 'devnet-node',
    source_version: '1.0.0',
    target_version: '1.1.0',
    target_binary_url: 'https://releases.example.test/devnet-node-1.1.0.mjs',
    target_binary_checksum: CHECKSUM_110,
    strategy: 'rolling',
    batch_size: 10,
    canary_size: null,
    failure_threshold: 0.2,
    health_wait_duration_ms: 300_000,
    created_by: '00000000-0000-4000-8000-000000000001',
    ...overrides,
  }
}

export function newGroup(overrides: Partial<NewRolloutGroup> = {}): NewRolloutGroup {
  return {
    chain_profile_id: 'devnet',
    node_type: 'full',
    failure_policy: 'partial_ok',
    component_order: [
      {
        binary_name: 'devnet-node',
        node_type: 'full',
        version: '1.1.0',
        url: 'https://releases.example.test/devnet-node-1.1.0.mjs',
        checksum: CHECKSUM_110,
        upgrade_id: null,
        migration_type: 'non_breaking',
        manifest_content_hash: null,
        manifest: null,
      },
    ],
    desired_versions: { 'devnet-node': '1.1.0' },
    strategy: 'rolling',
    batch_size: 10,
    canary_size: null,
    failure_threshold: 0.2,
    health_wait_duration_ms: 300_000,
    created_by: '00000000-0000-4000-8000-000000000001',
    ...overrides,
  }
}

export async function rolloutIn(db: Db, status: RolloutRecord['status'], overrides: Partial<NewRollout> = {}, now = T0): Promise<RolloutRecord> {
  const rollout = await insertRollout(db, newRollout(overrides), now)
  if (status !== 'pending') await db('rollouts').where({ id: rollout.id }).update({ status })
  return { ...rollout, status }
}

export async function groupIn(db: Db, status: RolloutGroupRecord['status'], overrides: Partial<NewRolloutGroup> = {}, now = T0): Promise<RolloutGroupRecord> {
  const group = await insertRolloutGroup(db, newGroup(overrides), now)
  if (status !== 'pending') await db('rollout_groups').where({ id: group.id }).update({ status })
  return { ...group, status }
}
