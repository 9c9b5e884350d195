/**
 * `/api/v1/hosts` (scope `admin`; docs/infrastructure.md, "Hosts"): the fleet the `ssh` provider
 * places nodes on. Adding a host is done here, by the api-server, because the check is an SSH
 * connection from the control plane's network (the CLI may run on a laptop that cannot reach the
 * hosts). The request carries the host's SSH private key once; the api-server keeps it in the SSH
 * key directory (secrets configuration), and no response or log line ever carries it.
 * `{host}` is a host's id, or the name of a host not removed.
 */
import { UnavailableError } from '../../errors.js'
import { HOST_STATES } from '../../hosts/host-states.js'
import { ROOT_DIR_PATTERN } from '../../hosts/prerequisites.js'
import { DRAIN_STATUSES } from '../../hosts/drains.js'
import { addHost, DEFAULT_ROOT_DIR, hostDetail, moveHost, type HostFleet, type OperatorHostAction } from '../../hosts/service.js'
import { FINGERPRINT_PATTERN } from '../../hosts/ssh-pool.js'
import { MAX_PRIVATE_KEY_BYTES, validatePrivateKey } from '../../hosts/ssh-keys.js'
import { HOST_LIST_ORDER, hostFromRow, hostListQuery, type HostRow } from '../../hosts/store.js'
import type { Db } from '../../db/knex.js'
import { paginateKeyset, paginationQuery, pageSchema } from '../pagination.js'
import { defineRoute, errorResponse, type ApiRoute } from '../route.js'
import { z } from '../zod.js'

export interface HostRouteDeps {
  db: Db
  now?: () => Date
  /** SSH to hosts and where their keys go; without it adding a host answers 503 (the rest works). */
  hostFleet?: Omit<HostFleet, 'db' | 'now'>
}

const TAGS = ['hosts']

export const HOST_NAME = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/
const ADDRESS = /^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$|^[0-9A-Fa-f:.]+$/
const SSH_USER = /^[a-z_][a-z0-9_-]{0,31}$/
const REGION = /^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?$/
const LABEL_KEY = /^[a-z0-9]([a-z0-9._/-]{0,61}[a-z0-9])?$/
const MAX_LABELS = 32

const timestamp = z.string().openapi({ format: 'date-time', example: '2026-01-31T12:00:00.000Z' })

const capacity = z
  .object({
    cpu: z.number().int().min(1).max(4096).openapi({ description: 'Cores', example: 8 }),
    memory_bytes: z.number().int().min(1).max(Number.MAX_SAFE_INTEGER).openapi({ example: 34359738368 }),
    disk_bytes: z.number().int().min(1).max(Number.MAX_SAFE_INTEGER).openapi({ example: 536870912000 }),
  })
  .strict()
  .openapi('HostCapacity')

const labels = z
  .record(z.string().regex(LABEL_KEY, 'label keys: lowercase letters, digits, ".", "_", "/" or "-" (at most 63)'), z.string().max(255))
  .refine((l) => Object.keys(l).length <= MAX_LABELS, `at most ${MAX_LABELS} labels`)
  .openapi({ example: { rack: 'r12', disk: 'nvme' } })

const hostView = z
  .object({
    id: z.string().uuid(),
    name: z.string(),
    address: z.string(),
    port: z.number().int(),
    user: z.string(),
    region: z.string(),
    root_dir: z.string().openapi({ description: 'Where node directories live on the host' }),
    capacity,
    labels: z.record(z.string()),
    state: z.enum(HOST_STATES),
    host_key_fingerprint: z.string().openapi({ description: 'The pinned SSH host key, as OpenSSH prints it', example: 'SHA256:nThbg6kXUpJWGl7E1IGOCspRomTxdCARLviKw6E5SY8' }),
    last_probe_at: timestamp.nullable(),
    last_probe_result: z.enum(['ok', 'unreachable', 'host_key_mismatch', 'failed']).nullable(),
    last_probe_error: z.string().nullable(),
    version: z.number().int(),
    created_at: timestamp,
    updated_at: timestamp,
    removed_at: timestamp.nullable(),
  })
  .openapi('Host')

const hostMoveView = hostView
  .extend({ changed: z.boolean().openapi({ description: 'false for a repeat (the host already was where the move puts it); of two moves at once, exactly one is true' }) })
  .openapi('HostMove')

const hostDetailView = hostView
  .extend({
    reservations: z
      .array(
        z.object({
          node_id: z.string().uuid(),
          node_state: z.string().nullable().openapi({ description: 'The node\'s state (null when the node row is gone)' }),
          instance_type: z.string(),
          rpc_port: z.number().int().openapi({ description: 'The chain\'s RPC port on the host' }),
          cpu: z.number().int(),
          memory_bytes: z.number().int(),
          disk_bytes: z.number().int(),
          host_key: z.string().openapi({ description: 'The placement\'s host key (the node\'s directory on the host)' }),
          created_at: timestamp,
        }),
      )
      .openapi({ description: 'What is placed on the host: one entry per node placement (a migration under way holds two, one on each host)' }),
    used: z.object({ cpu: z.number().int(), memory_bytes: z.number().int(), disk_bytes: z.number().int(), nodes: z.number().int() }).openapi({ description: 'The reservations added up' }),
    free: z.object({ cpu: z.number().int(), memory_bytes: z.number().int(), disk_bytes: z.number().int() }).openapi({ description: 'Capacity minus what is reserved' }),
    drain: z
      .object({
        id: z.string().uuid(),
        status: z.enum(DRAIN_STATUSES),
        requested_by: z.string().nullable(),
        current_node_id: z.string().nullable().openapi({ description: 'The node being moved, or waited for' }),
        activity: z.string().nullable().openapi({ description: 'What the drain is doing now' }),
        nodes_moved: z.number().int(),
        nodes_left: z.number().int().openapi({ description: 'Live nodes still on the host' }),
        stop_reason: z.string().nullable().openapi({ description: 'Why the drain stopped (no room elsewhere, a failed migration); drain again to continue' }),
        stopped_at_node_id: z.string().nullable(),
        started_at: timestamp,
        updated_at: timestamp,
        finished_at: timestamp.nullable(),
      })
      .nullable()
      .openapi({ description: 'The host\'s latest drain, running or not' }),
  })
  .openapi('HostDetail')

const addBody = z
  .object({
    name: z.string().regex(HOST_NAME, 'lowercase letters, digits and "-", at most 63, not starting or ending with "-"'),
    address: z.string().max(253).regex(ADDRESS, 'an IP address or a DNS name'),
    port: z.number().int().min(1).max(65535).default(22),
    user: z.string().regex(SSH_USER, 'a Unix user name'),
    ssh_private_key: z.string().min(1).max(MAX_PRIVATE_KEY_BYTES).openapi({ description: 'The SSH private key (OpenSSH or PEM, unencrypted). Stored in the secrets configuration, never returned' }),
    region: z.string().regex(REGION, 'lowercase letters, digits and "-" (at most 64)'),
    root_dir: z.string().regex(ROOT_DIR_PATTERN, 'an absolute path of letters, digits, ".", "_", "-" and "/"').default(DEFAULT_ROOT_DIR),
    capacity,
    labels: labels.default({}),
    host_key_fingerprint: z.string().regex(FINGERPRINT_PATTERN, 'SHA256:<43 base64 characters>, as ssh-keygen -lf prints it').optional().openapi({ description: 'Pin this host key up front; otherwise the key the host presents now is pinned' }),
  })
  .strict()
  .openapi('HostAdd')

const listQuery = paginationQuery.extend({
  state: z.enum(HOST_STATES).optional().openapi({ description: 'Only hosts in this state (removed hosts are listed only when asked for)' }),
  region: z.string().regex(REGION).optional(),
})

const hostParams = z.object({ host: z.string().max(63).openapi({ description: 'The host id, or the name of a host not removed' }) })
const NOT_FOUND_404 = errorResponse('No such host')
const CONFLICT_409 = errorResponse('The host is not in a state this action starts from, or it changed meanwhile, or (remove) nodes are on it')

export function hostRoutes(deps: HostRouteDeps): ApiRoute[] {
  const { db } = deps
  const now = deps.now ?? (() => new Date())
  const fleet = () => ({ db, now, ...(deps.hostFleet ? { keys: deps.hostFleet.keys, pool: deps.hostFleet.pool } : {}) })

  const action = (name: OperatorHostAction, summary: string, description: string, method: 'post' | 'delete' = 'post') =>
    defineRoute({
      method,
      path: method === 'delete' ? '/api/v1/hosts/{host}' : `/api/v1/hosts/{host}/${name}`,
      summary,
      description,
      tags: TAGS,
      auth: { scope: 'admin' },
      request: { params: hostParams },
      responses: { 200: hostMoveView, 404: NOT_FOUND_404, 409: CONFLICT_409 },
    }).handle(async ({ params, principal, log }) => {
      const host = await moveHost(fleet(), params.host, name, { requestedBy: principal.userId })
      if (host.changed) log.info({ host: host.name, hostId: host.id, action: name, state: host.state }, 'host state set by an operator')
      return { status: 200, body: host }
    })

  return [
    defineRoute({
      method: 'post',
      path: '/api/v1/hosts',
      summary: 'Add a host to the fleet: connect over SSH, pin its host key, check its prerequisites',
      description:
        'Nothing is recorded unless the control plane reaches the host with the key, the host presents the given host key (when one is given), and it has Node.js >= 20.19, its root directory writable and HOSTS_MIN_FREE_DISK free there. A failed check is a 400 whose details say what is missing.',
      tags: TAGS,
      auth: { scope: 'admin' },
      request: { body: addBody },
      responses: { 201: hostView, 400: errorResponse('Invalid input, or the SSH check failed (details say what)'), 409: errorResponse('A host with this name exists'), 503: errorResponse('This api-server has no SSH key directory configured') },
    }).handle(async ({ body, log }) => {
      if (!deps.hostFleet) throw new UnavailableError('hosts cannot be added here', 'this api-server has no host fleet configured (HOSTS_SSH_KEY_DIR)')
      validatePrivateKey(body.ssh_private_key)
      const host = await addHost(
        { db, now, ...deps.hostFleet },
        {
          name: body.name,
          address: body.address,
          port: body.port,
          user: body.user,
          privateKey: body.ssh_private_key,
          region: body.region,
          rootDir: body.root_dir,
          capacity: body.capacity,
          labels: body.labels,
          hostKeyFingerprint: body.host_key_fingerprint,
        },
      )
      log.info({ host: host.name, hostId: host.id, address: host.address, fingerprint: host.host_key_fingerprint }, 'host added')
      return { status: 201, body: host }
    }),

    defineRoute({
      method: 'get',
      path: '/api/v1/hosts',
      summary: 'List the hosts, by name',
      tags: TAGS,
      auth: { scope: 'admin' },
      request: { query: listQuery },
      responses: { 200: pageSchema(hostView).openapi('HostPage') },
    }).handle(async ({ query }) => {
      const page = await paginateKeyset(db, hostListQuery(db, { state: query.state, region: query.region }), {
        ...HOST_LIST_ORDER,
        limit: query.limit,
        cursor: query.cursor,
        map: (row) => hostFromRow(row as unknown as HostRow),
      })
      return { status: 200, body: page }
    }),

    defineRoute({
      method: 'get',
      path: '/api/v1/hosts/{host}',
      summary: 'One host, with what is reserved on it and its latest drain',
      tags: TAGS,
      auth: { scope: 'admin' },
      request: { params: hostParams },
      responses: { 200: hostDetailView, 404: NOT_FOUND_404 },
    }).handle(async ({ params }) => ({ status: 200, body: await hostDetail(db, params.host) })),

    action('cordon', 'Cordon a host: it takes no new nodes; its nodes stay', 'ready or unreachable -> cordoned; a cordoned host is answered unchanged with `changed: false` (a repeat); draining or removed answers 409.'),
    action('uncordon', 'Uncordon a host: it takes new nodes again', 'cordoned or draining -> ready; a ready host is answered unchanged with `changed: false` (a repeat); unreachable or removed answers 409.'),
    defineRoute({
      method: 'post',
      path: '/api/v1/hosts/{host}/drain',
      summary: 'Drain a host: no new nodes, its nodes moved off one at a time, then cordoned',
      description:
        'ready, cordoned or unreachable -> draining, and cordoned at once when no node is on it. Otherwise a drain moves its nodes to other hosts one at a time (each a forced migration, room reserved first) and cordons the host when none is left; `drain` in the answer shows its progress. A drain that finds no room for a node stops with the reason and the host stays draining; draining again continues. Draining a host whose drain runs changes nothing; uncordon stops it.',
      tags: TAGS,
      auth: { scope: 'admin' },
      request: { params: hostParams },
      responses: { 200: hostDetailView, 404: NOT_FOUND_404, 409: CONFLICT_409 },
    }).handle(async ({ params, principal, log }) => {
      const host = await moveHost(fleet(), params.host, 'drain', { requestedBy: principal.userId })
      log.info({ host: host.name, hostId: host.id, action: 'drain', state: host.state }, 'host state set by an operator')
      return { status: 200, body: await hostDetail(db, host.id) }
    }),
    action('remove', 'Remove a host from the fleet and forget its SSH key', 'Only a host with no nodes on it (else 409: drain it first). The row stays with state removed; its name is free again.', 'delete'),
  ]
}
