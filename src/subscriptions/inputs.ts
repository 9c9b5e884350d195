/**
 * Provisioning inputs of a subscription (spec: "Provisioning input spec (declared per chain)";
 * issue 5, "Provisioning inputs"): what a user submits before their node is provisioned, checked
 * against the chain profile's declared inputs and stored in `provisioning_inputs`.
 *
 * - `text` and `proof`: stored as plaintext in `value`, after the profile's `validation` regex
 *   matched the whole value.
 * - `secret` with source `user_provided`: a sealed box in the spec's layout (ephemeral public key
 *   32 || nonce 24 || ciphertext). It must open with a server key, and its plaintext must match
 *   the regex when the profile has one; the plaintext is then overwritten and the bytes received
 *   are stored unchanged in `sealed_value`. Provisioning opens them again and re-encrypts them
 *   under the node's data key.
 * - Secrets the service generates (`generated`) or the node produces (`chain_generated`) are
 *   never submitted.
 *
 * When inputs may change (docs/http.md, "Provisioning inputs"): the subscription is
 * `pending_payment` or `active`, none of its inputs has been marked `applied` by the provision
 * workflow, and it has no live node (not `failed` / `terminated`) past `provisioning`.
 */
import { lockRow, toDate, toDateOrNull } from '../db/dialect.js'
import { uuidv7, isUuid } from '../db/ids.js'
import type { Queryable } from '../db/knex.js'
import { getProfile, type ChainCatalogue, type ProfileInput } from '../config/chains.js'
import { ConflictError, NotFoundError, UnavailableError, ValidationError } from '../errors.js'
import { TERMINAL_NODE_STATES } from '../nodes/states.js'
import type { InputPhase, InputType } from '../secrets/input-specs.js'
import type { MasterKey } from '../secrets/master-key.js'
import { MAX_KEY_MATERIAL_BYTES, type KeySource } from '../secrets/node-key-types.js'
import { SEALED_BLOB_OVERHEAD } from '../secrets/sealed-blob.js'
import { openWithServerKey } from '../secrets/server-key.js'
import { MAX_INPUTS_PER_REQUEST, MAX_TEXT_INPUT_LENGTH } from './input-limits.js'

/** `pending` until the provision workflow has put the inputs on the node, then `applied`. */
export const INPUT_STATUSES = ['pending', 'applied'] as const
export type InputStatus = (typeof INPUT_STATUSES)[number]

/** Subscription statuses in which inputs may be submitted (node rules below still apply). */
export const INPUT_ACCEPTING_SUBSCRIPTION_STATUSES = ['pending_payment', 'active'] as const

export { MAX_INPUTS_PER_REQUEST, MAX_TEXT_INPUT_LENGTH }

/** A sealed secret: at most as much key material as the key store takes, plus the layout's fixed parts. */
export const MAX_SEALED_INPUT_BYTES = MAX_KEY_MATERIAL_BYTES + SEALED_BLOB_OVERHEAD

/** One input as a client sends it: `value` for text and proof, `sealed` (base64) for secrets. */
export interface SubmittedInput {
  name: string
  value?: string | undefined
  sealed?: string | undefined
}

export interface SubmitInputsRequest {
  userId: string
  subscriptionId: string
  inputs: readonly SubmittedInput[]
}

/**
 * Opens a sealed box with the server's key pairs and returns the plaintext (the caller
 * overwrites it); throws ValidationError when the box does not open.
 */
export type SealedInputOpener = (sealed: Uint8Array) => Promise<Uint8Array>

export interface SubmitInputsDeps {
  catalogue: ChainCatalogue
  /** Absent while secrets are not initialised: a secret input then fails with 503. */
  serverKeyOpener?: SealedInputOpener | undefined
  now?: Date
}

/** What is shown of a stored input: never a secret's bytes. */
export interface InputView {
  name: string
  type: InputType
  phase: InputPhase
  source: KeySource | null
  key_type: string | null
  status: InputStatus
  /** text and proof: the stored value; secrets: always null. */
  value: string | null
  /** When the current value was submitted (ISO 8601). */
  set_at: string
  applied_at: string | null
}

interface SubscriptionRef {
  id: string
  user_id: string
  chain_profile_id: string
  status: string
}

interface PreparedInput {
  name: string
  type: InputType
  phase: InputPhase
  source: KeySource | null
  key_type: string | null
  value: string | null
  sealed_value: Buffer | null
}

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/
const BASE64URL = /^[A-Za-z0-9_-]*$/

/** `openWithServerKey` bound to a database and the master key: tries the active key, then retired ones. */
export function serverKeyOpener(db: Queryable, masterKey: MasterKey): SealedInputOpener {
  return async (sealed) => (await openWithServerKey(db, masterKey, sealed)).plaintext
}

const notFound = (subscriptionId: string) => new NotFoundError('not found', `no subscription ${subscriptionId.slice(0, 60)} among your subscriptions`)

async function findSubscription(db: Queryable, subscriptionId: string): Promise<SubscriptionRef | undefined> {
  // Checked first: Postgres refuses to compare a uuid column with a malformed string.
  if (!isUuid(subscriptionId)) return undefined
  const row = (await db('subscriptions').where({ id: subscriptionId.toLowerCase() }).first('id', 'user_id', 'chain_profile_id', 'status')) as
    | Record<keyof SubscriptionRef, unknown>
    | undefined
  return row ? { id: String(row.id), user_id: String(row.user_id), chain_profile_id: String(row.chain_profile_id), status: String(row.status) } : undefined
}

/**
 * The subscription when the caller may see it: its owner, or any caller with `isAdmin`. Another
 * user's subscription is a NotFoundError exactly like an unknown (or malformed) id.
 */
export async function findCallerSubscription(db: Queryable, caller: { userId: string; isAdmin?: boolean; subscriptionId: string }): Promise<SubscriptionRef> {
  const subscription = await findSubscription(db, caller.subscriptionId)
  if (!subscription || (subscription.user_id !== caller.userId && !caller.isAdmin)) throw notFound(caller.subscriptionId)
  return subscription
}

/** Why inputs of this subscription can no longer change, or undefined when they can. */
export async function inputsLockedReason(db: Queryable, subscription: Pick<SubscriptionRef, 'id' | 'status'>): Promise<ConflictError | undefined> {
  const accepting: readonly string[] = INPUT_ACCEPTING_SUBSCRIPTION_STATUSES
  if (!accepting.includes(subscription.status)) {
    return new ConflictError(
      `subscription ${subscription.id} is ${subscription.status}`,
      'inputs are accepted only while a subscription is pending_payment, or active before its node is provisioned',
    )
  }
  const applied = await db('provisioning_inputs').where({ subscription_id: subscription.id, status: 'applied' }).first('name')
  if (applied) {
    return new ConflictError(
      `the inputs of subscription ${subscription.id} were applied to its node`,
      'inputs cannot change once provisioning has put them on the node',
    )
  }
  const node = (await db('nodes')
    .where({ subscription_id: subscription.id })
    .whereNotIn('state', [...TERMINAL_NODE_STATES, 'provisioning'])
    .first('id', 'state')) as { id: string; state: string } | undefined
  if (node) {
    return new ConflictError(
      `subscription ${subscription.id} has node ${node.id} in state ${node.state}, past provisioning`,
      'inputs are accepted only before the node is provisioned',
    )
  }
  return undefined
}

/**
 * Validates every input of the request and stores them all, or none: one bad input writes
 * nothing. Re-submitting a name replaces its value and sets it back to `pending`. Returns the
 * subscription's inputs after the write.
 */
export async function submitInputs(db: Queryable, request: SubmitInputsRequest, deps: SubmitInputsDeps): Promise<InputView[]> {
  const now = deps.now ?? new Date()
  const subscription = await findCallerSubscription(db, { userId: request.userId, subscriptionId: request.subscriptionId })
  const locked = await inputsLockedReason(db, subscription)
  if (locked) throw locked
  if (request.inputs.length === 0 || request.inputs.length > MAX_INPUTS_PER_REQUEST) {
    throw new ValidationError('invalid inputs', `give 1 to ${MAX_INPUTS_PER_REQUEST} inputs per request; got ${request.inputs.length}`)
  }
  const profile = getProfile(deps.catalogue, subscription.chain_profile_id)
  // Secrets are opened outside the transaction: unwrapping a server key may be a remote call.
  const prepared = await prepareInputs(profile.id, profile.inputs, request.inputs, deps.serverKeyOpener)

  await db.transaction(async (trx) => {
    // The state may have moved since the check above (payment, provisioning): check again
    // holding the subscription's row.
    await lockRow(trx, trx('subscriptions').where({ id: subscription.id }).first('id'))
    const current = await findSubscription(trx, subscription.id)
    if (!current) throw notFound(request.subscriptionId)
    const lockedNow = await inputsLockedReason(trx, current)
    if (lockedNow) throw lockedNow
    await trx('provisioning_inputs')
      .insert(prepared.map((input) => ({ id: uuidv7(now.getTime()), subscription_id: subscription.id, ...input, status: 'pending', applied_at: null, created_at: now, updated_at: now })))
      .onConflict(['subscription_id', 'name'])
      .merge(['type', 'phase', 'source', 'key_type', 'value', 'sealed_value', 'status', 'applied_at', 'updated_at'])
  })
  return listInputs(db, subscription.id)
}

async function prepareInputs(chain: string, declared: readonly ProfileInput[], submitted: readonly SubmittedInput[], opener: SealedInputOpener | undefined): Promise<PreparedInput[]> {
  const problems: { name: string; problem: string }[] = []
  const prepared: PreparedInput[] = []
  const seen = new Set<string>()
  const submittable = declared.filter((spec) => spec.type !== 'secret' || spec.source === 'user_provided').map((spec) => spec.name)
  for (const input of submitted) {
    const name = String(input.name).slice(0, 100)
    const spec = declared.find((s) => s.name === name)
    let result: PreparedInput | string
    if (seen.has(name)) result = 'given more than once'
    else if (!spec) result = `not an input of chain profile ${chain} (it takes: ${submittable.join(', ') || 'none'})`
    else result = spec.type === 'secret' ? await prepareSecret(spec, input, opener) : prepareText(spec, input)
    seen.add(name)
    if (typeof result === 'string') problems.push({ name, problem: result })
    else prepared.push(result)
  }
  const [first, ...others] = problems
  if (first) {
    throw new ValidationError(
      others.length === 0 ? `invalid input ${first.name}` : `${problems.length} invalid inputs`,
      problems.map((p) => `${p.name}: ${p.problem}`).join('; '),
    )
  }
  return prepared
}

function row(spec: ProfileInput, value: string | null, sealed: Buffer | null): PreparedInput {
  return { name: spec.name, type: spec.type, phase: spec.phase, source: spec.source ?? null, key_type: spec.key_type ?? null, value, sealed_value: sealed }
}

/** A problem (string) or the row to store. */
function prepareText(spec: ProfileInput, input: SubmittedInput): PreparedInput | string {
  if (input.sealed !== undefined) return `a ${spec.type} input is sent as "value", not "sealed"`
  if (input.value === undefined) return `a ${spec.type} input needs a "value"`
  if (typeof input.value !== 'string' || input.value.length === 0) return 'the value must be a non-empty string'
  if (input.value.length > MAX_TEXT_INPUT_LENGTH) return `the value is longer than ${MAX_TEXT_INPUT_LENGTH} characters`
  if (spec.validation !== undefined && !fullMatch(spec.validation, input.value)) return `the value does not match its validation pattern ${spec.validation}`
  return row(spec, input.value, null)
}

async function prepareSecret(spec: ProfileInput, input: SubmittedInput, opener: SealedInputOpener | undefined): Promise<PreparedInput | string> {
  if (spec.source === 'generated') return 'this secret is generated by the service; it cannot be submitted'
  if (spec.source === 'chain_generated') return 'this secret is produced by the node; it cannot be submitted'
  if (input.value !== undefined) return 'a secret is sent sealed to the server key ("sealed"), never as a plain "value" (docs/secrets.md)'
  if (input.sealed === undefined) return 'a secret input needs "sealed": base64 of ephemeral public key (32) || nonce (24) || ciphertext'
  const blob = decodeBase64(input.sealed)
  if (!blob) return '"sealed" is not base64'
  if (blob.length < SEALED_BLOB_OVERHEAD) return `the sealed box is ${blob.length} bytes; the layout needs at least ${SEALED_BLOB_OVERHEAD} (ephemeral public key 32, nonce 24, ciphertext with its 16-byte tag)`
  if (blob.length > MAX_SEALED_INPUT_BYTES) return `the sealed box is over ${MAX_SEALED_INPUT_BYTES} bytes`
  if (!opener) throw new UnavailableError('secrets are not initialised', 'this server has no master key to open sealed inputs; an operator runs `nodeplane secrets init`')

  let plaintext: Uint8Array
  try {
    plaintext = await opener(new Uint8Array(blob))
  } catch (err) {
    if (err instanceof ValidationError) return `${err.message}: ${err.details}`
    throw err
  }
  try {
    if (spec.validation !== undefined) {
      let text: string
      try {
        text = new TextDecoder('utf-8', { fatal: true }).decode(plaintext)
      } catch {
        return 'the opened secret is not UTF-8 text, which its validation pattern needs'
      }
      if (!fullMatch(spec.validation, text)) return `the opened secret does not match its validation pattern ${spec.validation}`
    }
  } finally {
    plaintext.fill(0)
  }
  // Spec: the sealed box is "stored as received".
  return row(spec, null, blob)
}

function decodeBase64(text: string): Buffer | undefined {
  if (typeof text !== 'string' || text.length === 0) return undefined
  if (BASE64.test(text)) return Buffer.from(text, 'base64')
  if (BASE64URL.test(text) && text.length % 4 !== 1) return Buffer.from(text, 'base64url')
  return undefined
}

/**
 * The spec's `validation` is "a regular expression applied to user input"; it must match the
 * whole value, so a pattern without `^…$` does not accept a value that merely contains a match.
 */
export function fullMatch(pattern: string, value: string): boolean {
  return new RegExp(`^(?:${pattern})$`).test(value)
}

type InputRow = Record<'name' | 'type' | 'phase' | 'source' | 'key_type' | 'status' | 'value' | 'updated_at' | 'applied_at', unknown>

/** The inputs stored for a subscription, by name; secrets show metadata only. */
export async function listInputs(db: Queryable, subscriptionId: string): Promise<InputView[]> {
  const rows = (await db('provisioning_inputs')
    .where({ subscription_id: subscriptionId })
    .orderBy('name')
    .select('name', 'type', 'phase', 'source', 'key_type', 'status', 'value', 'updated_at', 'applied_at')) as InputRow[]
  return rows.map((r) => {
    const type = String(r.type) as InputType
    return {
      name: String(r.name),
      type,
      phase: String(r.phase) as InputPhase,
      source: r.source == null ? null : (String(r.source) as KeySource),
      key_type: r.key_type == null ? null : String(r.key_type),
      status: String(r.status) as InputStatus,
      value: type === 'secret' || r.value == null ? null : String(r.value),
      set_at: toDate(r.updated_at).toISOString(),
      applied_at: toDateOrNull(r.applied_at)?.toISOString() ?? null,
    }
  })
}

/**
 * Names of the required `pre_provision` inputs the user has not provided, in the profile's
 * order (spec: provisioning starts with "validate required pre_provision inputs"). Secrets the
 * service generates or the node produces are never asked of the user, so they are never missing
 * here even when marked required. NotFoundError for an unknown subscription.
 */
export async function missingRequiredInputs(db: Queryable, catalogue: ChainCatalogue, subscriptionId: string): Promise<string[]> {
  const subscription = await findSubscription(db, subscriptionId)
  if (!subscription) throw new NotFoundError(`subscription ${subscriptionId.slice(0, 60)} not found`)
  const profile = getProfile(catalogue, subscription.chain_profile_id)
  const required = profile.inputs.filter((spec) => spec.required && spec.phase === 'pre_provision' && (spec.type !== 'secret' || spec.source === 'user_provided'))
  if (required.length === 0) return []
  const provided = new Set(
    ((await db('provisioning_inputs').where({ subscription_id: subscription.id }).select('name')) as { name: string }[]).map((r) => r.name),
  )
  return required.filter((spec) => !provided.has(spec.name)).map((spec) => spec.name)
}

/**
 * Deletes the subscription's secret inputs (issue 15: a user-provided secret dies with the
 * node). The sealed boxes are sealed to the server key, which outlives every node, so only
 * deleting them makes them unrecoverable; a later provisioning asks for them again. Returns the
 * number deleted.
 */
export async function deleteSealedInputs(db: Queryable, subscriptionIds: readonly string[]): Promise<number> {
  if (subscriptionIds.length === 0) return 0
  return Number(await db('provisioning_inputs').whereIn('subscription_id', subscriptionIds).andWhere((q) => q.where('type', 'secret').orWhereNotNull('sealed_value')).delete())
}
