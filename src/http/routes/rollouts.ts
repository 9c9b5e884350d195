/**
 * `/api/v1/rollouts` and `/api/v1/rollout-groups` (spec: Endpoints; docs/rollouts.md, "API"):
 * every route needs scope `admin` (403 otherwise; a `*` key does not grant it). Creation
 * validates the spec's request tables (src/rollouts/create.ts); the action routes hand over to
 * src/rollouts/control.ts, which refuses with 409 what the status tables do not allow. An
 * action answers with the rollout or group as it is now and `changed`: a signal is acted on by
 * the workflow (pause after the current batch), so its status moves afterwards; a repeat (a
 * signal whose effect already holds) is answered 200 with `changed: false` and nothing sent.
 */
import type { ArtifactSource } from '../../artifacts/resolve.js'
import type { ChainSource } from '../../config/chain-source.js'
import type { Db } from '../../db/knex.js'
import { createGroupRequest, createRollout, createRolloutGroup, createRolloutRequest } from '../../rollouts/create.js'
import { retryRolloutNode, signalRollout, signalRolloutGroup, startRollout, startRolloutGroup } from '../../rollouts/control.js'
import { ROLLOUT_STATUSES, type GroupSignal, type RolloutSignal } from '../../rollouts/states.js'
import { countRolloutNodes, listGroupRollouts, listRollouts, pageRolloutNodes, requireRollout, requireRolloutGroup } from '../../rollouts/store.js'
import {
  rolloutDetailView,
  rolloutGroupStatusView,
  rolloutGroupView,
  rolloutNodeView,
  rolloutView,
  signalledGroupView,
  signalledRolloutView,
  toRolloutDetailView,
  toRolloutGroupStatusView,
  toRolloutGroupView,
  toRolloutNodeView,
  toRolloutView,
} from '../../rollouts/views.js'
import { paginationQuery, pageSchema } from '../pagination.js'
import { defineRoute, errorResponse, type ApiRoute } from '../route.js'
import { currentCatalogue } from './chains.js'
import { z } from '../zod.js'

export interface RolloutRouteDeps {
  db: Db
  now?: () => Date
  /** The chain catalogue; its config dir holds upgrades/. The package's own when absent. */
  chains?: ChainSource
  /** ARTIFACT_ALLOWED_SOURCES (docs/artifacts.md); none when absent. */
  artifactSources?: readonly string[]
  /** The artifact store and release public keys; without it rollouts cannot name stored artifacts. */
  artifactStore?: ArtifactSource
}

const ADMIN = { scope: 'admin' } as const
const TAGS = ['rollouts']
const GROUP_TAGS = ['rollout-groups']

// Not `.uuid()`: a malformed id answers the same 404 as an unknown one (the store reads it as absent).
const idParams = z.object({ id: z.string().openapi({ description: 'Rollout id' }) })
const groupIdParams = z.object({ id: z.string().openapi({ description: 'Rollout group id' }) })
const nodeParams = z.object({ id: z.string().openapi({ description: 'Rollout id' }), nodeId: z.string().openapi({ description: 'Node id' }) })

const listQuery = paginationQuery.extend({
  status: z.enum(ROLLOUT_STATUSES).optional().openapi({ description: 'Only rollouts in this status' }),
  chain_profile_id: z.string().min(1).max(100).optional().openapi({ description: 'Only rollouts of this chain profile', example: 'devnet' }),
  group_id: z.string().uuid('must be a rollout group id (UUID)').optional().openapi({ description: 'Only the component rollouts of this group' }),
})

const ROLLOUT_404 = errorResponse('No such rollout')
const GROUP_404 = errorResponse('No such rollout group')
const ROLLOUT_409 = errorResponse("The rollout's status does not allow this (docs/rollouts.md, status tables), or it changed meanwhile")
const GROUP_409 = errorResponse("The group's status does not allow this, or it changed meanwhile")
const REPEATS = ' A signal whose effect already holds is a repeat: 200 with the object as it is and `changed: false`, nothing sent (docs/cli.md, "Repeats").'

/** The rollout signals with a route of their own: path segment -> signal. */
const ROLLOUT_SIGNAL_ROUTES: { path: string; signal: RolloutSignal; summary: string; description: string }[] = [
  { path: 'pause', signal: 'pause', summary: 'Pause a running rollout after its current batch', description: 'running -> paused once the batch in flight has finished. A paused rollout is a repeat; 409 for any other status, or one being rolled back.' },
  { path: 'resume', signal: 'resume', summary: 'Resume a paused rollout', description: 'paused -> running; the next batch starts. A running rollout is a repeat, unless its canary gate waits for approval (409: approve it instead); 409 for any other status, or one being rolled back.' },
  { path: 'cancel', signal: 'cancel', summary: 'Cancel a rollout: no new batches, in-flight nodes finish', description: 'running or paused -> cancelled: upgraded nodes keep the new version (use rollback to revert them). pending or scheduled -> cancelled at once, no node touched (an extension of the spec). A cancelled rollout is a repeat.' },
  { path: 'rollback', signal: 'rollback', summary: 'Roll back every succeeded node to the source version', description: 'Pauses the rollout, upgrades each succeeded node back (target and source swapped), then rolled_back. One being rolled back, or rolled back, is a repeat.' },
  { path: 'force', signal: 'force', summary: 'Override the failure threshold and continue', description: 'A rollout auto-paused at its failure threshold resumes, and the threshold no longer pauses it (`forced`). A running rollout already forced is a repeat.' },
  { path: 'approve-canary', signal: 'approve_canary', summary: 'Approve the canary batch of a breaking migration', description: 'The canary of a breaking migration waits for this (`awaiting: approve_canary`); the rest of the fleet follows. A breaking canary rollout past its canary batch is a repeat; 409 when nothing waits (and while paused: resume first).' },
]

const GROUP_SIGNAL_ROUTES: { signal: GroupSignal; summary: string }[] = [
  { signal: 'pause', summary: "Pause a running group (and its current component's rollout)" },
  { signal: 'resume', summary: 'Resume a paused group' },
  { signal: 'cancel', summary: 'Cancel a group: no further components' },
  { signal: 'skip', summary: 'Skip the current component and go on with the next' },
]

export function rolloutRoutes(deps: RolloutRouteDeps): ApiRoute[] {
  const { db } = deps
  const now = () => deps.now?.() ?? new Date()
  const catalogue = currentCatalogue(deps.chains)

  const rolloutSignalRoutes = ROLLOUT_SIGNAL_ROUTES.map(({ path, signal, summary, description }) =>
    defineRoute({
      method: 'post',
      path: `/api/v1/rollouts/{id}/${path}`,
      summary,
      description: description + REPEATS,
      tags: TAGS,
      auth: ADMIN,
      request: { params: idParams },
      responses: { 200: signalledRolloutView, 404: ROLLOUT_404, 409: ROLLOUT_409 },
    }).handle(async ({ params, principal, log }) => {
      const rollout = await signalRollout(db, params.id, signal, { by: principal.userId, now: now() })
      if (rollout.changed) log.info({ rolloutId: rollout.id, signal }, 'rollout signal sent')
      return { status: 200, body: { ...toRolloutView(rollout), changed: rollout.changed } }
    }),
  )

  const groupSignalRoutes = GROUP_SIGNAL_ROUTES.map(({ signal, summary }) =>
    defineRoute({
      method: 'post',
      path: `/api/v1/rollout-groups/{id}/${signal}`,
      summary,
      description: `${signal === 'skip' ? 'Never a repeat: each skip moves past one more component.' : 'A group already where the signal moves it is a repeat.'}${REPEATS}`,
      tags: GROUP_TAGS,
      auth: ADMIN,
      request: { params: groupIdParams },
      responses: { 200: signalledGroupView, 404: GROUP_404, 409: GROUP_409 },
    }).handle(async ({ params, principal, log }) => {
      const group = await signalRolloutGroup(db, params.id, signal, { by: principal.userId, now: now() })
      if (group.changed) log.info({ groupId: group.id, signal }, 'rollout group signal sent')
      return { status: 200, body: { ...toRolloutGroupView(group), changed: group.changed } }
    }),
  )

  return [
    defineRoute({
      method: 'post',
      path: '/api/v1/rollouts',
      summary: 'Create a pending rollout: auto mode (upgrade_id, from its manifest) or manual mode',
      description:
        'Auto mode: upgrades/<chain_profile_id>/<upgrade_id>.yaml fills binary_name, target_version, target_binary_url, target_binary_checksum, migration_type, recovery_plan, config_changes, state compatibility and manifest_content_hash; fields also sent must agree (400 otherwise) and source_version must be one of the compatible source versions and one the nodes can go back to (a release, or a version a rollout installed). Manual mode: binary_name, target_version and target_binary_checksum are required; with target_binary_url the artifact is fetched from that URL, which must lie under a source in ARTIFACT_ALLOWED_SOURCES or be exactly a release of the chain profile (400 otherwise, for a public host too), without it they name a stored artifact that must be signed by a key in ARTIFACT_RELEASE_PUBLIC_KEYS (docs/artifacts.md). source_version must be a release of the chain profile or a version a rollout installed on nodes of this type (so nodes can go back to it). binary_name must be the binary of the chain profile (a node runs one). Defaults: strategy rolling, batch_size 10, failure_threshold 0.2, health_wait_duration 5m, canary_size 1 (canary). 409 while the chain has a pending, scheduled, running or paused rollout, or an active rollout group.',
      tags: TAGS,
      auth: ADMIN,
      request: { body: createRolloutRequest },
      responses: {
        201: rolloutView,
        400: errorResponse('A field is invalid, the manifest is missing or invalid, or a field disagrees with it'),
        409: errorResponse('The chain already has an active rollout (named in the error) or rollout group'),
      },
    }).handle(async ({ body, principal, log }) => {
      const rollout = await createRollout(db, body, { createdBy: principal.userId, catalogue: await catalogue(), now: now(), artifactSources: deps.artifactSources ?? [], ...(deps.artifactStore ? { artifactStore: deps.artifactStore } : {}) })
      log.info({ rolloutId: rollout.id, chainProfileId: rollout.chain_profile_id, upgradeId: rollout.upgrade_id }, 'rollout created')
      return { status: 201, body: toRolloutView(rollout) }
    }),

    defineRoute({
      method: 'get',
      path: '/api/v1/rollouts',
      summary: 'List rollouts, newest first',
      tags: TAGS,
      auth: ADMIN,
      request: { query: listQuery },
      responses: { 200: pageSchema(rolloutView).openapi('RolloutPage') },
    }).handle(async ({ query }) => {
      const page = await listRollouts(db, { status: query.status, chainProfileId: query.chain_profile_id, groupId: query.group_id?.toLowerCase() }, { limit: query.limit, cursor: query.cursor })
      return { status: 200, body: { items: page.items.map(toRolloutView), next_cursor: page.next_cursor } }
    }),

    defineRoute({
      method: 'get',
      path: '/api/v1/rollouts/{id}',
      summary: 'One rollout: status, progress counters and how many nodes are in each status',
      tags: TAGS,
      auth: ADMIN,
      request: { params: idParams },
      responses: { 200: rolloutDetailView, 404: ROLLOUT_404 },
    }).handle(async ({ params }) => {
      const rollout = await requireRollout(db, params.id)
      return { status: 200, body: toRolloutDetailView(rollout, await countRolloutNodes(db, rollout.id)) }
    }),

    defineRoute({
      method: 'get',
      path: '/api/v1/rollouts/{id}/nodes',
      summary: "A rollout's nodes in batch order, with status and upgrade_phase",
      description: 'Ordered by batch_index, then node id; empty until the rollout has planned its batches.',
      tags: TAGS,
      auth: ADMIN,
      request: { params: idParams, query: paginationQuery },
      responses: { 200: pageSchema(rolloutNodeView).openapi('RolloutNodePage'), 404: ROLLOUT_404 },
    }).handle(async ({ params, query }) => {
      const rollout = await requireRollout(db, params.id)
      const page = await pageRolloutNodes(db, rollout.id, { limit: query.limit, cursor: query.cursor })
      return { status: 200, body: { items: page.items.map(toRolloutNodeView), next_cursor: page.next_cursor } }
    }),

    defineRoute({
      method: 'post',
      path: '/api/v1/rollouts/{id}/start',
      summary: 'Start a pending rollout (scheduled when its scheduled_at is still ahead)',
      description: `pending -> running, or pending -> scheduled when scheduled_at is in the future. A component rollout of a group is started by its group (409). A running or scheduled rollout is a repeat; a paused one answers 409 (resume it).${REPEATS}`,
      tags: TAGS,
      auth: ADMIN,
      request: { params: idParams },
      responses: { 200: signalledRolloutView, 404: ROLLOUT_404, 409: ROLLOUT_409 },
    }).handle(async ({ params, principal, log }) => {
      const rollout = await startRollout(db, params.id, { by: principal.userId, now: now() })
      if (rollout.changed) log.info({ rolloutId: rollout.id, status: rollout.status }, 'rollout started')
      return { status: 200, body: { ...toRolloutView(rollout), changed: rollout.changed } }
    }),

    ...rolloutSignalRoutes,

    defineRoute({
      method: 'post',
      path: '/api/v1/rollouts/{id}/nodes/{nodeId}/retry',
      summary: 'Retry one failed node of a running or paused rollout',
      description: 'The node goes back to pending and is upgraded again (attempt_count grows). 409 unless the node failed.',
      tags: TAGS,
      auth: ADMIN,
      request: { params: nodeParams },
      responses: { 200: rolloutNodeView, 404: ROLLOUT_404, 409: ROLLOUT_409 },
    }).handle(async ({ params, principal, log }) => {
      const rollout = await requireRollout(db, params.id)
      const node = await retryRolloutNode(db, rollout.id, params.nodeId.toLowerCase(), { by: principal.userId, now: now() })
      log.info({ rolloutId: rollout.id, nodeId: node.node_id }, 'rollout node retry')
      return { status: 200, body: toRolloutNodeView(node) }
    }),

    defineRoute({
      method: 'post',
      path: '/api/v1/rollout-groups',
      summary: 'Create a pending rollout group: components upgraded one after another',
      description:
        'failure_policy is required (no default). Each component is resolved to binary_name, version, url, checksum and upgrade_id: from its manifest when upgrade_id is given, otherwise from the chain profile release of that version. desired_versions, when given, must name exactly the components and their versions. No rollout is created until the group runs. 409 while the chain has an active group or rollout.',
      tags: GROUP_TAGS,
      auth: ADMIN,
      request: { body: createGroupRequest },
      responses: {
        201: rolloutGroupView,
        400: errorResponse('A field is invalid, or a component cannot be resolved (missing manifest, no such release)'),
        409: errorResponse('The chain already has an active rollout group (named in the error) or rollout'),
      },
    }).handle(async ({ body, principal, log }) => {
      const group = await createRolloutGroup(db, body, { createdBy: principal.userId, catalogue: await catalogue(), now: now(), artifactSources: deps.artifactSources ?? [], ...(deps.artifactStore ? { artifactStore: deps.artifactStore } : {}) })
      log.info({ groupId: group.id, chainProfileId: group.chain_profile_id }, 'rollout group created')
      return { status: 201, body: toRolloutGroupView(group) }
    }),

    defineRoute({
      method: 'get',
      path: '/api/v1/rollout-groups/{id}',
      summary: 'One rollout group',
      tags: GROUP_TAGS,
      auth: ADMIN,
      request: { params: groupIdParams },
      responses: { 200: rolloutGroupView, 404: GROUP_404 },
    }).handle(async ({ params }) => {
      return { status: 200, body: toRolloutGroupView(await requireRolloutGroup(db, params.id)) }
    }),

    defineRoute({
      method: 'get',
      path: '/api/v1/rollout-groups/{id}/status',
      summary: 'A group with per-component progress',
      description: "Each component shows its latest rollout's status and counters, or not_started before its turn.",
      tags: GROUP_TAGS,
      auth: ADMIN,
      request: { params: groupIdParams },
      responses: { 200: rolloutGroupStatusView, 404: GROUP_404 },
    }).handle(async ({ params }) => {
      const group = await requireRolloutGroup(db, params.id)
      return { status: 200, body: toRolloutGroupStatusView(group, await listGroupRollouts(db, group.id)) }
    }),

    defineRoute({
      method: 'post',
      path: '/api/v1/rollout-groups/{id}/start',
      summary: 'Start a pending group: its components upgrade one after another',
      tags: GROUP_TAGS,
      auth: ADMIN,
      request: { params: groupIdParams },
      responses: { 200: signalledGroupView, 404: GROUP_404, 409: GROUP_409 },
    }).handle(async ({ params, principal, log }) => {
      const group = await startRolloutGroup(db, params.id, { by: principal.userId, now: now() })
      if (group.changed) log.info({ groupId: group.id }, 'rollout group started')
      return { status: 200, body: { ...toRolloutGroupView(group), changed: group.changed } }
    }),

    ...groupSignalRoutes,
  ]
}
