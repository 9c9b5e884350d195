/**
 * `/api/v1/subscriptions/{id}/inputs` (issue 5, "Provisioning inputs"; docs/http.md): submit a
 * subscription's provisioning inputs (scope `subscriptions:write`, owner only, admins included:
 * what a node is set up with is the owner's to say) and read what was submitted (scope
 * `subscriptions:read`; owner, or an `admin` credential). Secrets arrive sealed to the server key
 * and never leave again: answers and log lines carry input names and metadata only.
 */
import { ADMIN_SCOPE, hasScope } from '../../auth/scopes.js'
import type { ChainSource } from '../../config/chain-source.js'
import type { Db } from '../../db/knex.js'
import { INPUT_PHASES, INPUT_TYPES } from '../../secrets/input-specs.js'
import type { MasterKey } from '../../secrets/master-key.js'
import { KEY_SOURCES } from '../../secrets/node-keys.js'
import {
  findCallerSubscription,
  INPUT_STATUSES,
  listInputs,
  MAX_INPUTS_PER_REQUEST,
  MAX_SEALED_INPUT_BYTES,
  MAX_TEXT_INPUT_LENGTH,
  missingRequiredInputs,
  serverKeyOpener,
  submitInputs,
} from '../../subscriptions/inputs.js'
import { defineRoute, errorResponse, type ApiRoute } from '../route.js'
import { currentCatalogue } from './chains.js'
import { z } from '../zod.js'

export interface InputRouteDeps {
  db: Db
  now?: () => Date
  /** Absent until `nodeplane secrets init`: secret inputs then answer 503. */
  masterKey?: MasterKey
  /** The chain catalogue, asked per request; the package's own `chains/` when not given. */
  chains?: ChainSource
}

const TAGS = ['subscriptions']

const timestamp = z.string().openapi({ format: 'date-time', example: '2025-01-31T12:00:00.000Z' })

const submittedInput = z
  .object({
    name: z.string().min(1).max(100).openapi({ description: "An input declared by the subscription's chain profile", example: 'operator_label' }),
    value: z.string().max(MAX_TEXT_INPUT_LENGTH).optional().openapi({ description: 'text and proof inputs: the value, matched against the profile\'s validation pattern' }),
    sealed: z
      .string()
      .max(Math.ceil(MAX_SEALED_INPUT_BYTES / 3) * 4)
      .optional()
      .openapi({ description: 'user_provided secrets: base64 of ephemeral public key (32) || nonce (24) || NaCl box ciphertext, sealed to GET /api/v1/crypto/public-key' }),
  })
  .strict()
  .openapi('SubmittedInput')

const submitBody = z.object({ inputs: z.array(submittedInput).min(1).max(MAX_INPUTS_PER_REQUEST) }).openapi('SubmitInputsRequest')

const inputView = z
  .object({
    name: z.string(),
    type: z.enum(INPUT_TYPES),
    phase: z.enum(INPUT_PHASES),
    source: z.enum(KEY_SOURCES).nullable().openapi({ description: 'Secrets only' }),
    key_type: z.string().nullable(),
    status: z.enum(INPUT_STATUSES).openapi({ description: '`pending` until provisioning has put it on the node, then `applied`' }),
    value: z.string().nullable().openapi({ description: 'text and proof: the stored value; always null for secrets' }),
    set_at: timestamp.openapi({ description: 'When the current value was submitted' }),
    applied_at: timestamp.nullable(),
  })
  .openapi('ProvisioningInput')

const submitAnswer = z.object({ subscription_id: z.string().uuid(), inputs: z.array(inputView) }).openapi('ProvisioningInputs')

const listAnswer = submitAnswer
  .extend({ missing_required: z.array(z.string()).openapi({ description: 'Required pre_provision inputs not provided yet; provisioning fails without them' }) })
  .openapi('ProvisioningInputsWithMissing')

// Not `.uuid()`: a malformed id answers the same 404 as an unknown one.
const params = z.object({ id: z.string() })

export function inputRoutes(deps: InputRouteDeps): ApiRoute[] {
  const { db } = deps
  const catalogue = currentCatalogue(deps.chains)
  const opener = deps.masterKey ? serverKeyOpener(db, deps.masterKey) : undefined
  return [
    defineRoute({
      method: 'post',
      path: '/api/v1/subscriptions/{id}/inputs',
      summary: "Submit provisioning inputs of one of the caller's subscriptions (all or nothing)",
      description:
        'Accepted while the subscription is pending_payment, or active before its node is provisioned (409 otherwise). Re-submitting a name replaces its value. Secrets are sealed to GET /api/v1/crypto/public-key (docs/secrets.md).',
      tags: TAGS,
      auth: { scope: 'subscriptions:write' },
      request: { params, body: submitBody },
      responses: {
        200: submitAnswer,
        404: errorResponse('No such subscription, or not yours (the same answer for both)'),
        409: errorResponse('The subscription no longer accepts inputs'),
        503: errorResponse('A secret input was sent while secrets are not initialised on this server'),
      },
    }).handle(async ({ params, body, principal, log }) => {
      const now = deps.now?.() ?? new Date()
      const inputs = await submitInputs(
        db,
        { userId: principal.userId, subscriptionId: params.id, inputs: body.inputs },
        { catalogue: await catalogue(), serverKeyOpener: opener, now },
      )
      const subscriptionId = params.id.toLowerCase()
      log.info({ subscriptionId, inputNames: body.inputs.map((i) => i.name) }, 'provisioning inputs submitted')
      return { status: 200, body: { subscription_id: subscriptionId, inputs } }
    }),

    defineRoute({
      method: 'get',
      path: '/api/v1/subscriptions/{id}/inputs',
      summary: "A subscription's submitted inputs (values of text and proof inputs only) and the required ones still missing",
      tags: TAGS,
      auth: { scope: 'subscriptions:read' },
      request: { params },
      responses: { 200: listAnswer, 404: errorResponse('No such subscription, or not yours (the same answer for both)') },
    }).handle(async ({ params, principal }) => {
      const subscription = await findCallerSubscription(db, { userId: principal.userId, isAdmin: hasScope(principal.scopes, ADMIN_SCOPE), subscriptionId: params.id })
      const [inputs, missing] = await Promise.all([listInputs(db, subscription.id), missingRequiredInputs(db, await catalogue(), subscription.id)])
      return { status: 200, body: { subscription_id: subscription.id, inputs, missing_required: missing } }
    }),
  ]
}
