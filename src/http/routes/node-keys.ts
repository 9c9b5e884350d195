/**
 * `POST /api/v1/nodes/{id}/keys/export` (scope `keys:export`, owner only; issue 5): the node's
 * exportable keys, each sealed to an X25519 public key the caller gives, in the spec's layout
 * (ephemeral public key 32 || nonce 24 || ciphertext). Plaintext keys never cross the wire and
 * never reach a log line.
 *
 * Owner only, admins included: the spec grants export to the owner, and an admin who could pull
 * any user's private keys would make every admin credential a key-theft credential. Another
 * user's node answers 404, exactly like a node that does not exist.
 */
import crypto from 'node:crypto'
import type { Db, Queryable } from '../../db/knex.js'
import { NotFoundError, UnavailableError } from '../../errors.js'
import { loadDataKey, type DataKey } from '../../secrets/data-keys.js'
import { KeyMaterialError } from '../../secrets/errors.js'
import type { MasterKey } from '../../secrets/master-key.js'
import { decryptNodeKeys, NODE_KEY_TYPES } from '../../secrets/node-keys.js'
import { assertUsableRecipientKey, sealBlob, SEALED_BLOB_ALGORITHM } from '../../secrets/sealed-blob.js'
import { defineRoute, errorResponse, NO_STORE, type ApiRoute } from '../route.js'
import { z } from '../zod.js'

export interface NodeKeyRouteDeps {
  db: Db
  /** Absent until secrets are initialised: export then answers 503. */
  masterKey?: MasterKey
}

const recipientKey = z
  .string()
  .max(64)
  .transform((text, ctx) => {
    if (!/^[A-Za-z0-9+/]{43}=$|^[A-Za-z0-9_-]{43}$/.test(text)) {
      ctx.addIssue({ code: z.ZodIssueCode.custom, message: 'must be the base64 of a 32-byte X25519 public key' })
      return z.NEVER
    }
    const key = new Uint8Array(Buffer.from(text, text.endsWith('=') || /[+/]/.test(text) ? 'base64' : 'base64url'))
    try {
      assertUsableRecipientKey(key)
    } catch (err) {
      ctx.addIssue({ code: z.ZodIssueCode.custom, message: (err as { details?: string }).details ?? 'not a usable X25519 public key' })
      return z.NEVER
    }
    return key
  })
  .openapi({ type: 'string', description: 'base64 of the 32-byte X25519 public key to seal the keys to', example: 'hSDwCYkwp1R0i33ctD73Wg2/Og0mOBr066SpjqqbTmo=' })

const exportBody = z.object({ recipient_public_key: recipientKey }).openapi('KeyExportRequest')

const exportedKey = z
  .object({
    name: z.string(),
    key_type: z.enum(NODE_KEY_TYPES),
    public_key: z.string().nullable().openapi({ description: 'hex; ed25519: the raw 32-byte key, secp256k1: the compressed point; null for opaque keys' }),
    sealed: z.string().openapi({
      description: `base64 of ephemeral public key (32) || nonce (24) || ciphertext (${SEALED_BLOB_ALGORITHM}), sealed to recipient_public_key`,
    }),
  })
  .openapi('ExportedNodeKey')

const exportAnswer = z.object({ node_id: z.string().uuid(), keys: z.array(exportedKey) }).openapi('KeyExport')

const params = z.object({ id: z.string().uuid('must be a node id (UUID)') })

async function isOwnNode(db: Queryable, nodeId: string, userId: string): Promise<boolean> {
  const row = await db('nodes as n').join('subscriptions as s', 's.id', 'n.subscription_id').where({ 'n.id': nodeId, 's.user_id': userId }).first('n.id')
  return row !== undefined
}

export function nodeKeyRoutes(deps: NodeKeyRouteDeps): ApiRoute[] {
  const { db } = deps
  return [
    defineRoute({
      method: 'post',
      path: '/api/v1/nodes/{id}/keys/export',
      summary: "Export the node's exportable keys, sealed to a public key of the caller's choosing",
      description: 'Open each `sealed` with the secret key of `recipient_public_key` (NaCl box.open with the first 32 bytes as the sender key and the next 24 as the nonce).',
      tags: ['nodes'],
      auth: { scope: 'keys:export' },
      request: { params, body: exportBody },
      responses: {
        200: exportAnswer,
        404: errorResponse('No such node, or not yours'),
        503: errorResponse('Secrets are not initialised on this server'),
      },
    }).handle(async ({ params, body, principal, log }) => {
      if (!(await isOwnNode(db, params.id, principal.userId))) throw new NotFoundError('not found', `no node ${params.id}`)
      if (!deps.masterKey) throw new UnavailableError('secrets are not initialised', 'this server has no master key; an operator runs `nodeplane secrets init`')
      const exportable = await db('node_keys').where({ node_id: params.id, exportable: true }).first('id')
      if (!exportable) return { status: 200, body: { node_id: params.id, keys: [] } }

      const dataKey = await nodeDataKey(db, deps.masterKey, params.id)
      try {
        const keys = await decryptNodeKeys(db, dataKey, { exportableOnly: true })
        const sealed = keys.map((key) => {
          try {
            return {
              name: key.name,
              key_type: key.key_type,
              public_key: key.public_key,
              sealed: Buffer.from(sealBlob(key.plaintext, body.recipient_public_key)).toString('base64'),
            }
          } finally {
            key.plaintext.fill(0)
          }
        })
        const recipient = crypto.createHash('sha256').update(body.recipient_public_key).digest('hex').slice(0, 16)
        log.info({ nodeId: params.id, keyNames: sealed.map((k) => k.name), recipientKeyId: recipient }, 'exported node keys')
        return { status: 200, body: { node_id: params.id, keys: sealed }, headers: NO_STORE }
      } finally {
        dataKey.destroy()
      }
    }),
  ]
}

/** Keys without a data key mean a damaged key store, not a missing resource. */
async function nodeDataKey(db: Queryable, masterKey: MasterKey, nodeId: string): Promise<DataKey> {
  try {
    return await loadDataKey(db, masterKey, nodeId)
  } catch (err) {
    if (err instanceof NotFoundError) throw new KeyMaterialError(`node ${nodeId} has keys but no data key`, err.details)
    throw err
  }
}
