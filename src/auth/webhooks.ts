/**
 * The identity provider's webhook (spec: Authentication, "Webhook POST /webhooks/idp").
 *
 * Signatures follow the Standard Webhooks scheme (the one Svix implements):
 * - headers `webhook-id`, `webhook-timestamp`, `webhook-signature`, or the same with `svix-`;
 * - the secret is `whsec_` + base64 of the key bytes;
 * - the signed content is `${id}.${timestamp}.${raw body}`, HMAC-SHA256, base64;
 * - the signature header holds space-separated `v1,<signature>` entries; any match passes
 *   (a provider rotating its secret signs with both for a while);
 * - the timestamp (Unix seconds) must be within 5 minutes of our clock, either way.
 *
 * Verification runs on the raw body bytes, before any JSON parsing.
 *
 * A delivery id is remembered for 7 days (`idempotency_keys`, key `idempotency:webhook:idp:<id>`),
 * recorded in the same transaction as the event's effect: a redelivery of a processed id is
 * answered 200 without running again, and a delivery whose processing failed is not recorded,
 * so the provider's retry processes it.
 */
import crypto from 'node:crypto'
import { z } from 'zod'
import type { Db, Queryable } from '../db/knex.js'
import { isUniqueViolation } from '../db/errors.js'
import { ConfigError, UnauthorizedError, ValidationError } from '../errors.js'
import { AlreadyProcessedError, isProcessed, markProcessed } from '../events/idempotency.js'
import type { Logger } from '../log.js'
import { createUser, findUserByEmail, findUserByExternalAuthId } from './users.js'

export const WEBHOOK_TOLERANCE_MS = 5 * 60_000
export const WEBHOOK_ID_TTL_MS = 7 * 24 * 3_600_000
const SECRET_PREFIX = 'whsec_'
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/
const CONSUMER = 'auth-server-idp-webhook'
const MAX_WEBHOOK_ID_LENGTH = 200

/** The key bytes of a `whsec_<base64>` secret. Throws ConfigError when it is not base64. */
export function parseWebhookSecret(secret: string): Buffer {
  const encoded = secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret
  if (encoded.length === 0 || !BASE64.test(encoded)) {
    throw new ConfigError(['AUTH_IDP_WEBHOOK_SIGNING_SECRET: must be the signing secret as the identity provider shows it, whsec_ followed by base64'])
  }
  return Buffer.from(encoded, 'base64')
}

export type HeaderLookup = (name: string) => string | undefined

export interface VerifiedDelivery {
  id: string
  timestamp: Date
}

/** `${id}.${timestamp}.${body}` signed with the key, base64: what a sender puts after `v1,`. */
export function signWebhook(key: Buffer, id: string, timestamp: number, rawBody: Buffer | string): string {
  return crypto.createHmac('sha256', key).update(`${id}.${timestamp}.`).update(rawBody).digest('base64')
}

/**
 * Checks a delivery's signature and timestamp over the raw body. Throws UnauthorizedError
 * (401) when a header is missing, the timestamp is out of tolerance or no signature matches.
 */
export function verifyWebhookSignature(options: {
  key: Buffer
  header: HeaderLookup
  rawBody: Buffer
  now: Date
  toleranceMs?: number
}): VerifiedDelivery {
  const { header } = options
  const id = header('webhook-id') ?? header('svix-id')
  const timestampText = header('webhook-timestamp') ?? header('svix-timestamp')
  const signatures = header('webhook-signature') ?? header('svix-signature')
  if (!id || !timestampText || !signatures) {
    throw new UnauthorizedError('missing webhook signature', 'the webhook-id, webhook-timestamp and webhook-signature headers (or svix-*) are required')
  }
  // Provider ids are short (`msg_…`); the bound keeps the stored key within its column.
  if (id.length > MAX_WEBHOOK_ID_LENGTH) throw new UnauthorizedError('invalid webhook id', `webhook-id is longer than ${MAX_WEBHOOK_ID_LENGTH} characters`)
  if (!/^\d{1,12}$/.test(timestampText)) throw new UnauthorizedError('invalid webhook timestamp', 'webhook-timestamp must be Unix seconds')
  const timestamp = Number(timestampText)
  const tolerance = options.toleranceMs ?? WEBHOOK_TOLERANCE_MS
  if (Math.abs(options.now.getTime() - timestamp * 1000) > tolerance) {
    throw new UnauthorizedError('stale webhook timestamp', `the timestamp is more than ${tolerance / 1000} s away from the server's clock`)
  }
  const expected = Buffer.from(signWebhook(options.key, id, timestamp, options.rawBody), 'base64')
  const matches = signatures
    .split(' ')
    .filter((entry) => entry.startsWith('v1,'))
    .some((entry) => {
      const given = Buffer.from(entry.slice(3), 'base64')
      // timingSafeEqual needs equal lengths; a length mismatch reveals nothing secret.
      return given.length === expected.length && crypto.timingSafeEqual(given, expected)
    })
  if (!matches) throw new UnauthorizedError('invalid webhook signature', 'no v1 signature in webhook-signature matches the body')
  return { id, timestamp: new Date(timestamp * 1000) }
}

const emailAddress = z.object({ id: z.string(), email_address: z.string() }).passthrough()
const userData = z
  .object({
    id: z.string().min(1).max(255),
    email_addresses: z.array(emailAddress).optional(),
    primary_email_address_id: z.string().nullish(),
  })
  .passthrough()

/** The envelope every event has; `data` is checked per event type. */
export const idpEventSchema = z.object({ type: z.string().min(1), data: z.unknown() }).passthrough()
export type IdpEvent = z.infer<typeof idpEventSchema>

export type WebhookOutcome =
  | 'duplicate'
  | 'ignored'
  | 'user_created'
  | 'user_exists'
  | 'user_updated'
  | 'user_unchanged'
  | 'user_unknown'
  | 'user_deleted_logged'

/** The primary email: the entry of `email_addresses` whose id is `primary_email_address_id`. */
export function primaryEmail(data: z.infer<typeof userData>): string | null {
  if (!data.primary_email_address_id) return null
  return data.email_addresses?.find((e) => e.id === data.primary_email_address_id)?.email_address ?? null
}

/**
 * Processes one verified delivery exactly once per id: a processed id is answered `duplicate`;
 * otherwise the event's effect and the id are committed together.
 */
export async function processIdpWebhook(db: Db, delivery: { id: string; event: IdpEvent }, log: Logger, now: Date): Promise<WebhookOutcome> {
  const key = `webhook:idp:${delivery.id}`
  if (await isProcessed(db, key, now)) return 'duplicate'
  try {
    return await db.transaction(async (trx) => {
      await markProcessed(trx, key, CONSUMER, WEBHOOK_ID_TTL_MS, now)
      return applyIdpEvent(trx, delivery.event, log, now)
    })
  } catch (err) {
    // A concurrent delivery of the same id committed first.
    if (err instanceof AlreadyProcessedError) return 'duplicate'
    throw err
  }
}

/** The effect of one event (spec): create, update email, log deletion; others ignored. */
export async function applyIdpEvent(db: Queryable, event: IdpEvent, log: Logger, now: Date): Promise<WebhookOutcome> {
  switch (event.type) {
    case 'user.created':
      return userCreated(db, parseUserData(event), log, now)
    case 'user.updated':
      return userUpdated(db, parseUserData(event), log, now)
    case 'user.deleted': {
      const id = typeof (event.data as { id?: unknown } | null)?.id === 'string' ? (event.data as { id: string }).id : undefined
      // Spec: logged only; the local user (and what it owns) stays.
      log.info({ externalAuthId: id }, 'identity provider deleted a user; the local user is kept')
      return 'user_deleted_logged'
    }
    default:
      log.info({ eventType: event.type.slice(0, 100) }, 'identity provider event ignored')
      return 'ignored'
  }
}

function parseUserData(event: IdpEvent): z.infer<typeof userData> {
  const parsed = userData.safeParse(event.data)
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => `data.${i.path.join('.')}: ${i.message}`).slice(0, 5)
    throw new ValidationError(`invalid ${event.type} event`, issues.join('; '))
  }
  return parsed.data
}

async function userCreated(db: Queryable, data: z.infer<typeof userData>, log: Logger, now: Date): Promise<WebhookOutcome> {
  if (await findUserByExternalAuthId(db, data.id)) return 'user_exists'
  let email = primaryEmail(data)
  // The email may belong to another local user already (an operator created one with
  // `nodeplane user create`): the new user is created without it rather than linked, since
  // linking on an email claim would let whoever controls that address take the account over.
  if (email !== null && (await findUserByEmail(db, email))) {
    log.warn({ externalAuthId: data.id }, 'identity provider user created without email: the address belongs to another local user')
    email = null
  }
  try {
    const user = await createUser(db, { external_auth_id: data.id, email }, now)
    log.info({ userId: user.id, externalAuthId: data.id }, 'user created from the identity provider')
    return 'user_created'
  } catch (err) {
    // An email the users module refuses as malformed: keep the user, drop the address.
    if (err instanceof ValidationError && email !== null) {
      log.warn({ externalAuthId: data.id }, 'identity provider user created without email: the address is not valid')
      await createUser(db, { external_auth_id: data.id, email: null }, now)
      return 'user_created'
    }
    throw err
  }
}

async function userUpdated(db: Queryable, data: z.infer<typeof userData>, log: Logger, now: Date): Promise<WebhookOutcome> {
  const user = await findUserByExternalAuthId(db, data.id)
  if (!user) return 'user_unknown'
  const email = primaryEmail(data)?.trim() || null
  if (email === user.email) return 'user_unchanged'
  if (email !== null && email.toLowerCase() !== user.email?.toLowerCase()) {
    const owner = await findUserByEmail(db, email)
    if (owner && owner.id !== user.id) {
      log.warn({ userId: user.id, externalAuthId: data.id }, 'email not updated: the address belongs to another local user')
      return 'user_unchanged'
    }
  }
  try {
    // In a savepoint: a unique violation (a concurrent claim of the address) would otherwise
    // abort the whole Postgres transaction, the delivery's id record with it.
    await db.transaction((sp) => sp('users').where({ id: user.id }).update({ email, updated_at: now }))
  } catch (err) {
    if (!isUniqueViolation(err)) throw err
    log.warn({ userId: user.id, externalAuthId: data.id }, 'email not updated: the address belongs to another local user')
    return 'user_unchanged'
  }
  log.info({ userId: user.id }, 'user email updated from the identity provider')
  return 'user_updated'
}
