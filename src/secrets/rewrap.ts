/**
 * Rewrapping after a rotation of the Vault transit key (docs/secrets.md, "Rotating the master
 * key"): every value the master key wrapped (per-node data keys, server X25519 secret keys) is
 * sent to transit `rewrap` in batches and stored again under the key's latest version, so the
 * operator can then raise `min_decryption_version` and older key versions stop decrypting.
 *
 * One batch: read up to REWRAP_BATCH rows after the last id seen, ask Vault to rewrap them (the
 * plaintext never leaves Vault), then update each row only if it still holds the value that was
 * read. A row deleted or rewrapped meanwhile (another run, a terminated node) is left as it is now.
 * Dying between batches loses nothing: a row holds either its old or its new ciphertext, both of
 * which decrypt, and a run again rewraps what is still old. Values the master key did not wrap
 * (another `master_key_id`) are counted, never sent.
 */
import type { Knex } from 'knex'
import type { Db } from '../db/knex.js'
import { ciphertextVersion } from './vault/client.js'
import type { VaultTransitMasterKey } from './vault/transit-master-key.js'

export const REWRAP_BATCH = 100

export interface RewrapCounts {
  /** Now under the latest key version, having been under an older one. */
  rewrapped: number
  already_latest: number
  failed: number
  /** Wrapped by another master key (a local key file): not Vault's to rewrap. */
  other_master_key: number
}

export interface RewrapFailure {
  kind: 'data_key' | 'server_key'
  /** The node id of a data key, the key id of a server key pair. */
  id: string
  /** Vault's reason, e.g. the version is below min_decryption_version. */
  reason: string
}

export interface RewrapResult {
  master_key_id: string
  /** The latest key version Vault rewrapped to; null when nothing was sent. */
  latest_version: number | null
  data_keys: RewrapCounts
  server_keys: RewrapCounts
  failures: RewrapFailure[]
}

interface WrappedTable {
  kind: RewrapFailure['kind']
  table: string
  idColumn: string
  valueColumn: string
}

const TABLES: readonly WrappedTable[] = [
  { kind: 'data_key', table: 'node_data_keys', idColumn: 'node_id', valueColumn: 'wrapped_key' },
  { kind: 'server_key', table: 'server_key_pairs', idColumn: 'id', valueColumn: 'wrapped_secret_key' },
]

export async function rewrapMasterKeyValues(db: Db, masterKey: VaultTransitMasterKey, batchSize = REWRAP_BATCH): Promise<RewrapResult> {
  const result: RewrapResult = { master_key_id: masterKey.id, latest_version: null, data_keys: emptyCounts(), server_keys: emptyCounts(), failures: [] }
  for (const table of TABLES) {
    const counts = table.kind === 'data_key' ? result.data_keys : result.server_keys
    counts.other_master_key = await countOthers(db, table, masterKey.id)
    let after: string | undefined
    for (;;) {
      const rows = (await db(table.table)
        .where({ master_key_id: masterKey.id })
        .modify((q: Knex.QueryBuilder) => (after === undefined ? q : q.where(table.idColumn, '>', after)))
        .orderBy(table.idColumn)
        .limit(batchSize)
        .select({ id: table.idColumn, wrapped: table.valueColumn })) as Array<{ id: string; wrapped: string }>
      if (rows.length === 0) break
      after = rows[rows.length - 1]?.id
      const answers = await masterKey.rewrap(rows.map((r) => r.wrapped))
      for (const [i, row] of rows.entries()) {
        const answer = answers[i]
        if (!answer || 'error' in answer) {
          counts.failed++
          result.failures.push({ kind: table.kind, id: row.id, reason: answer?.error ?? 'no answer' })
          continue
        }
        result.latest_version = Math.max(result.latest_version ?? 0, answer.version)
        if (answer.version <= ciphertextVersion(row.wrapped)) {
          counts.already_latest++
          continue
        }
        const updated = await db(table.table)
          .where({ [table.idColumn]: row.id, [table.valueColumn]: row.wrapped })
          .update({ [table.valueColumn]: answer.ciphertext })
        if (updated === 1) counts.rewrapped++
      }
    }
  }
  return result
}

function emptyCounts(): RewrapCounts {
  return { rewrapped: 0, already_latest: 0, failed: 0, other_master_key: 0 }
}

async function countOthers(db: Db, table: WrappedTable, masterKeyId: string): Promise<number> {
  const row = (await db(table.table).whereNot({ master_key_id: masterKeyId }).count({ n: '*' }).first()) as { n: number | string } | undefined
  return Number(row?.n ?? 0)
}
