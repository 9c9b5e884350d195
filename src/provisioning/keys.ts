/**
 * The key steps of the lifecycle workflows (spec: provisioning sequence; docs/secrets.md): keys
 * are generated or re-encrypted under the node's data key, travel to the host only sealed to the
 * agent's X25519 key, and come back from the host only sealed to the server key. Plaintext exists
 * only inside a step, never in a journal, a command row or a log.
 */
import type { KeyExport } from '../agent-gateway/protocol.js'
import { findRegistration } from '../agent-gateway/registrations.js'
import type { ChainProfile, ProfileInput } from '../config/chains.js'
import { toJson } from '../db/dialect.js'
import type { Queryable } from '../db/knex.js'
import { ValidationError } from '../errors.js'
import { deriveBackupKey } from '../secrets/backup-keys.js'
import { createDataKey, deleteNodeKeys, loadDataKey } from '../secrets/data-keys.js'
import { decryptNodeKeys, generateNodeKey, storeNodeKey, type NodeKeyType } from '../secrets/node-keys.js'
import { seal, type SealedBox } from '../secrets/sealed-box.js'
import { activeServerPublicKey, openWithServerKey } from '../secrets/server-key.js'
import { runAgentCommand } from './agent-calls.js'
import type { LifecycleDeps } from './deps.js'

const HEX_KEY = /^(0x)?[0-9a-fA-F]{64}$/

function secrets(profile: ChainProfile, source: ProfileInput['source']): ProfileInput[] {
  return profile.inputs.filter((i) => i.type === 'secret' && i.source === source)
}

/** Spec: "validate required pre_provision inputs" — everything the user must give is there. */
export async function assertRequiredInputs(db: Queryable, profile: ChainProfile, subscriptionId: string): Promise<void> {
  const required = profile.inputs.filter((i) => i.required && i.phase === 'pre_provision' && (i.type !== 'secret' || i.source === 'user_provided'))
  if (required.length === 0) return
  const given = new Set(((await db('provisioning_inputs').where({ subscription_id: subscriptionId }).select('name')) as { name: string }[]).map((r) => r.name))
  const missing = required.filter((i) => !given.has(i.name)).map((i) => i.name)
  if (missing.length > 0) throw new ValidationError(`required inputs missing: ${missing.join(', ')}`, 'submit them with POST /api/v1/subscriptions/{id}/inputs')
}

/** Spec: "generate keys; decrypt and re-encrypt user-provided secrets if any". Idempotent. */
export async function prepareNodeKeys(
  deps: LifecycleDeps,
  nodeId: string,
  subscriptionId: string,
  profile: ChainProfile,
): Promise<{ generated: string[]; user_provided: string[]; inputs_read_at: string }> {
  const readAt = (deps.now ?? (() => new Date()))()
  const dataKey = await createDataKey(deps.db, deps.masterKey, nodeId)
  try {
    const generated: string[] = []
    for (const input of secrets(profile, 'generated')) {
      await generateNodeKey(deps.db, { nodeId, name: input.name, keyType: input.key_type as 'ed25519' | 'secp256k1', exportable: true }, dataKey)
      generated.push(input.name)
    }
    const provided: string[] = []
    const wanted = new Map(secrets(profile, 'user_provided').map((i) => [i.name, i]))
    const rows = (await deps.db('provisioning_inputs').where({ subscription_id: subscriptionId, type: 'secret' }).whereNotNull('sealed_value').select('name', 'sealed_value')) as {
      name: string
      sealed_value: Buffer
    }[]
    for (const row of rows) {
      const input = wanted.get(row.name)
      if (!input) continue
      const { plaintext } = await openWithServerKey(deps.db, deps.masterKey, new Uint8Array(row.sealed_value))
      try {
        const typed = asTypedKey(input.key_type, plaintext)
        await deps.db.transaction(async (trx) => {
          await trx('node_keys').where({ node_id: nodeId, name: row.name }).delete()
          await storeNodeKey(trx, { nodeId, name: row.name, keyType: typed.keyType, source: 'user_provided', plaintext: typed.bytes, exportable: true }, dataKey)
        })
        typed.bytes.fill(0)
      } finally {
        plaintext.fill(0)
      }
      provided.push(row.name)
    }
    return { generated, user_provided: provided, inputs_read_at: readAt.toISOString() }
  } finally {
    dataKey.destroy()
  }
}

/** A user-provided ed25519/secp256k1 private key given as 64 hex digits; anything else stays opaque bytes. */
function asTypedKey(keyType: string | undefined, plaintext: Uint8Array): { keyType: NodeKeyType; bytes: Buffer } {
  const text = Buffer.from(plaintext).toString('utf8').trim()
  if ((keyType === 'ed25519' || keyType === 'secp256k1') && HEX_KEY.test(text)) return { keyType, bytes: Buffer.from(text.replace(/^0x/, ''), 'hex') }
  return { keyType: 'opaque', bytes: Buffer.from(plaintext) }
}

/**
 * Spec: "inject keys" — every generated and user-provided key, sealed to this host's agent, into
 * its `keys/`. With `chainGeneratedFrom` (a migration without a snapshot), the keys the chain
 * wrote itself and provisioning captured go back to the paths that profile gives them, so the
 * node keeps its identity on the new host. Returns the names of the keys injected.
 */
export async function injectNodeKeys(
  deps: LifecycleDeps,
  nodeId: string,
  commandKey: string,
  heartbeat?: () => void,
  chainGeneratedFrom?: ChainProfile,
): Promise<string[]> {
  const registration = await findRegistration(deps.db, nodeId)
  if (!registration) throw new Error(`node ${nodeId} has no registered agent to inject keys into`)
  const agentKey = Buffer.from(registration.public_key, 'base64')
  const dataKey = await loadDataKey(deps.db, deps.masterKey, nodeId).catch(() => undefined)
  if (!dataKey) return []
  const chainInputs = new Map(chainGeneratedFrom ? secrets(chainGeneratedFrom, 'chain_generated').map((i) => [i.name, i]) : [])
  const chainPaths = new Map([...chainInputs].map(([name, i]) => [name, i.path as string]))
  const keys: { name: string; path: string; location: 'keys' | 'state'; sealed: SealedBox; restore?: Omit<KeyExport, 'path'> }[] = []
  try {
    for (const k of await decryptNodeKeys(deps.db, dataKey)) {
      const chainPath = k.source === 'chain_generated' ? chainPaths.get(k.name) : undefined
      if (k.source !== 'chain_generated' || chainPath !== undefined) {
        const content = k.key_type === 'opaque' ? k.plaintext : Buffer.from(`${k.plaintext.toString('hex')}\n`)
        // A key the chain keeps inside itself (a wallet's seed) goes back into the chain after its start.
        const restore = chainPath === undefined ? undefined : chainInputs.get(k.name)?.export
        keys.push({ name: k.name, path: chainPath ?? k.name, location: chainPath === undefined ? 'keys' : 'state', sealed: seal(content, agentKey), ...(restore ? { restore } : {}) })
        content.fill(0)
      }
      k.plaintext.fill(0)
    }
  } finally {
    dataKey.destroy()
  }
  if (keys.length === 0) return []
  await runAgentCommand(deps, { nodeId, type: 'inject_keys', payload: { keys: keys.map(({ path, location, sealed, restore }) => ({ path, location, sealed, ...(restore ? { restore } : {}) })) }, key: commandKey }, heartbeat)
  return keys.map((k) => k.name)
}

/**
 * Spec: "capture chain-generated keys": the agent seals them to the server key; they are stored
 * under the node's data key so a migration can restore them.
 */
export async function captureChainKeys(deps: LifecycleDeps, nodeId: string, profile: ChainProfile, commandKey: string, heartbeat?: () => void): Promise<string[]> {
  const inputs = secrets(profile, 'chain_generated')
  if (inputs.length === 0) return []
  const server = await activeServerPublicKey(deps.db)
  if (!server) throw new Error('secrets are not initialised: no server key to seal captured keys to (nodeplane secrets init)')
  const result = (await runAgentCommand(
    deps,
    { nodeId, type: 'capture_keys', payload: { paths: inputs.map((i) => i.path as string), recipient_public_key: server.public_key, ...exportsOf(inputs) }, key: commandKey },
    heartbeat,
  )) as { keys: { path: string; sealed: SealedBox }[] }
  const dataKey = await createDataKey(deps.db, deps.masterKey, nodeId)
  try {
    for (const input of inputs) {
      const captured = result.keys.find((k) => k.path === input.path)
      if (!captured) throw new Error(`the agent did not return ${input.path}`)
      const blob = Buffer.concat([
        Buffer.from(captured.sealed.ephemeral_public_key, 'base64'),
        Buffer.from(captured.sealed.nonce, 'base64'),
        Buffer.from(captured.sealed.ciphertext, 'base64'),
      ])
      const { plaintext } = await openWithServerKey(deps.db, deps.masterKey, blob)
      try {
        await deps.db.transaction(async (trx) => {
          await trx('node_keys').where({ node_id: nodeId, name: input.name }).delete()
          await storeNodeKey(trx, { nodeId, name: input.name, keyType: 'opaque', source: 'chain_generated', plaintext, exportable: true }, dataKey)
        })
      } finally {
        plaintext.fill(0)
      }
    }
  } finally {
    dataKey.destroy()
  }
  return inputs.map((i) => i.name)
}

/** Keys the chain keeps inside itself (a wallet's seed): the agent has the chain write them to their path first. */
function exportsOf(inputs: ProfileInput[]): { exports?: KeyExport[] } {
  const exports = inputs.flatMap((i) => (i.export ? [{ ...i.export, path: i.path as string }] : []))
  return exports.length > 0 ? { exports } : {}
}

/**
 * Only the inputs as they were when provisioning read them: a value re-submitted afterwards was
 * not used, so it stays visibly `pending` instead of being marked applied.
 */
export async function markInputsApplied(db: Queryable, subscriptionId: string, readAt: Date, now: Date): Promise<number> {
  return db('provisioning_inputs')
    .where({ subscription_id: subscriptionId })
    .whereNot({ status: 'applied' })
    .andWhere('updated_at', '<=', readAt)
    .update({ status: 'applied', applied_at: now, updated_at: now })
}

/**
 * The key of the node's backup `backupId`, sealed to an agent's X25519 key (base64) for a backup
 * or restore command: the command row then holds nothing that opens the backup once that host is
 * gone. NotFoundError when the node has no data key (its keys were deleted: nothing to back up).
 */
export async function sealedBackupKey(deps: Pick<LifecycleDeps, 'db' | 'masterKey'>, nodeId: string, backupId: string, agentPublicKey: string): Promise<SealedBox> {
  const dataKey = await loadDataKey(deps.db, deps.masterKey, nodeId)
  const key = deriveBackupKey(dataKey, backupId)
  try {
    return seal(key, Buffer.from(agentPublicKey, 'base64'))
  } finally {
    key.fill(0)
    dataKey.destroy()
  }
}

/** Commands whose payload or result carries key material, sealed to a host's or the server's key. */
const KEY_BEARING_COMMANDS = ['inject_keys', 'capture_keys', 'backup', 'restore']

/**
 * Spec: keys are deleted with the node; recovery is then impossible. Besides the chain keys and
 * the data key, the node's command rows lose the sealed boxes they carried: a `capture_keys`
 * result is sealed to the server key, which outlives the node and would still open it. Call it
 * in one transaction.
 */
export async function deleteKeys(db: Queryable, nodeId: string): Promise<{ keys: number; dataKeys: number; commandsScrubbed: number }> {
  const deleted = await deleteNodeKeys(db, nodeId)
  const scrubbed = await db('agent_commands')
    .where({ node_id: nodeId })
    .whereIn('type', KEY_BEARING_COMMANDS)
    .update({ payload: toJson({ scrubbed: 'key material deleted with the node' }), result: null })
  return { ...deleted, commandsScrubbed: Number(scrubbed) }
}
