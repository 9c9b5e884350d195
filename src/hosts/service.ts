/**
 * The host fleet's operations (docs/infrastructure.md, "Hosts"): add (connect, pin the host key,
 * check prerequisites, then record), the operator's state moves (a drain starts the `host-drain`
 * workflow), and a host's detail with its reservations.
 *
 * `addHost` does every SSH check before it writes anything: a host that cannot be reached, that
 * refuses the key, presents another host key than the one given, or lacks a prerequisite leaves
 * no row and no key file. The row and the key file are written together: the key first inside the
 * row's transaction, and removed again when the transaction does not commit.
 */
import { lockRow, toDate } from '../db/dialect.js'
import { isUuid, uuidv7 } from '../db/ids.js'
import { isUniqueViolation } from '../db/errors.js'
import type { Db, Queryable } from '../db/knex.js'
import { ConflictError, NotFoundError, ValidationError } from '../errors.js'
import { HOST_DRAIN_WORKFLOW } from '../provisioning/workflow-names.js'
import { startWorkflow } from '../workflows/index.js'
import { finishDrain, insertDrain, latestDrainOf, runningDrainOf, type HostDrain } from './drains.js'
import { nextHostState, type HostAction } from './host-states.js'
import { checkPrerequisites } from './prerequisites.js'
import { HostKeyMismatchError, SshConnectError, SshTimeoutError, type SshPool, type SshTarget } from './ssh-pool.js'
import type { SshKeyStore } from './ssh-keys.js'
import { countLiveNodesOnHost, findHostById, findLiveHostByName, insertHost, updateHostState, type Host, type HostCapacity } from './store.js'

export interface HostFleet {
  db: Db
  pool: SshPool
  keys: SshKeyStore
  /** HOSTS_MIN_FREE_DISK: free bytes a host's root directory needs to be added. */
  minFreeDiskBytes: number
  now?: () => Date
}

export interface AddHostInput {
  name: string
  address: string
  port: number
  user: string
  privateKey: string
  region: string
  rootDir: string
  capacity: HostCapacity
  labels: Record<string, string>
  /** Pin given up front; otherwise the key the host presents now is pinned. */
  hostKeyFingerprint?: string | undefined
}

export const DEFAULT_ROOT_DIR = '/var/lib/nodeplane'

/** SSH failures of `host add` as the 400 the operator reads (what failed, what to do). */
function checkFailed(err: unknown, name: string): never {
  if (err instanceof HostKeyMismatchError) throw new ValidationError('host key mismatch', err.message)
  if (err instanceof SshConnectError || err instanceof SshTimeoutError) throw new ValidationError(`cannot reach host ${name}`, err.message)
  throw err
}

export async function addHost(fleet: HostFleet, input: AddHostInput): Promise<Host> {
  const now = fleet.now ?? (() => new Date())
  if (await findLiveHostByName(fleet.db, input.name)) throw new ConflictError('host exists', `a host named ${input.name} exists; choose another name or remove it first`)
  const id = uuidv7()
  const target: SshTarget = { id, address: input.address, port: input.port, user: input.user, privateKey: input.privateKey, hostKeyFingerprint: input.hostKeyFingerprint }
  try {
    const fingerprint = await fleet.pool.connect(target).catch((err: unknown) => checkFailed(err, input.name))
    const report = await checkPrerequisites(fleet.pool, target, input.rootDir, fleet.minFreeDiskBytes).catch((err: unknown) => checkFailed(err, input.name))
    if (report.missing.length > 0) throw new ValidationError(`host ${input.name} lacks prerequisites`, report.missing.join('; '))

    let keyWritten = false
    try {
      return await fleet.db.transaction(async (trx) => {
        const host = await insertHost(trx, { ...input, id, hostKeyFingerprint: fingerprint, now: now() })
        await fleet.keys.put(id, input.privateKey)
        keyWritten = true
        return host
      })
    } catch (err) {
      if (keyWritten) await fleet.keys.remove(id)
      if (isUniqueViolation(err)) throw new ConflictError('host exists', `a host named ${input.name} exists; choose another name or remove it first`)
      throw err
    }
  } finally {
    // The pool keeps connections of recorded hosts only; the probe reopens with the stored key.
    fleet.pool.drop(id)
  }
}

/** A host by id or name (removed ones by id only); 404 otherwise. */
export async function resolveHost(db: Queryable, ref: string): Promise<Host> {
  const host = isUuid(ref) ? await findHostById(db, ref.toLowerCase()) : await findLiveHostByName(db, ref)
  if (!host) throw new NotFoundError('host not found', `no host ${ref} (nodeplane host list)`)
  return host
}

export type OperatorHostAction = 'cordon' | 'uncordon' | 'drain' | 'remove'

/**
 * cordon, uncordon, drain, remove. Repeating the move a host already made (cordon a cordoned
 * host) returns it unchanged. `drain` ends `cordoned` at once when no node is on the host;
 * otherwise the host is `draining` and a `host-drain` run moves its nodes off (one running per
 * host: draining again while it runs changes nothing, after it stopped starts a new one that
 * continues). Leaving `draining` any other way (uncordon, remove) cancels the running drain.
 * `remove` refuses a host that still has nodes, and forgets its SSH key. `changed` is false for
 * such a repeat (docs/cli.md, "Repeats"): judged under the row lock, so of two cordons at once
 * exactly one is true.
 */
export async function moveHost(
  fleet: Pick<HostFleet, 'db' | 'now'> & { keys?: SshKeyStore; pool?: SshPool },
  ref: string,
  action: OperatorHostAction,
  options: { requestedBy?: string } = {},
): Promise<Host & { changed: boolean }> {
  const now = fleet.now ?? (() => new Date())
  const result = await fleet.db.transaction(async (trx) => {
    // Locked and read again: two drains of one host at once would both find no running drain
    // and the second insert would break the one-running-drain index (Postgres; SQLite's write
    // transactions are exclusive already).
    const resolved = await resolveHost(trx, ref)
    await lockRow(trx, trx('hosts').where({ id: resolved.id }).first('id'))
    const host = (await findHostById(trx, resolved.id)) ?? resolved
    const already = (action === 'cordon' && host.state === 'cordoned') || (action === 'uncordon' && host.state === 'ready') || (action === 'drain' && host.state === 'draining')
    if (already && action !== 'drain') return { ...host, changed: false }
    let steps: HostAction[] = already ? [] : [action]
    let nodes = 0
    if (action === 'remove' || action === 'drain') {
      nodes = await countLiveNodesOnHost(trx, host.id)
      if (action === 'remove' && nodes > 0) throw new ConflictError(`host ${host.name} has ${nodes} node(s)`, `drain it first (nodeplane host drain --host ${host.name}); a host is removed only when no node is on it`)
      if (action === 'drain' && nodes === 0) steps = [...steps, 'drained']
    }
    let state = host.state
    for (const step of steps) state = nextHostState(state, step, host.name)
    const running = await runningDrainOf(trx, host.id)
    if (running && state !== 'draining') {
      // Its run sees it at its next look (within the drain poll interval) and ends.
      await finishDrain(trx, running.id, { status: state === 'cordoned' ? 'completed' : 'cancelled' }, now())
    }
    const drainStarts = action === 'drain' && state === 'draining' && !running
    if (drainStarts) {
      const drain = await insertDrain(trx, { hostId: host.id, requestedBy: options.requestedBy ?? null, now: now() })
      await startWorkflow(trx, HOST_DRAIN_WORKFLOW, { drainId: drain.id, hostId: host.id }, { key: drain.id, now: now() })
    }
    if (state === host.state) return { ...host, changed: drainStarts }
    if (!(await updateHostState(trx, host, state, now()))) throw new ConflictError('host changed', `host ${host.name} changed meanwhile; try again`)
    return { ...((await findHostById(trx, host.id)) as Host), changed: true }
  })
  if (action === 'remove' && result.state === 'removed') {
    await fleet.keys?.remove(result.id)
    fleet.pool?.drop(result.id)
  }
  return result
}

/** A node placed on a host, as `host show` lists it. */
export interface HostReservationView {
  node_id: string
  node_state: string | null
  instance_type: string
  rpc_port: number
  cpu: number
  memory_bytes: number
  disk_bytes: number
  host_key: string
  created_at: string
}

/** A host with what is reserved on it, what is left, and its latest drain. */
export interface HostDetail extends Host {
  reservations: HostReservationView[]
  used: HostCapacity & { nodes: number }
  free: HostCapacity
  drain: (HostDrain & { nodes_left: number }) | null
}

export async function hostDetail(db: Queryable, ref: string): Promise<HostDetail> {
  const host = await resolveHost(db, ref)
  const rows = (await db('host_reservations as r')
    .leftJoin('nodes as n', 'n.id', 'r.node_id')
    .where('r.host_id', host.id)
    .orderBy([{ column: 'r.created_at' }, { column: 'r.host_key' }])
    .select('r.node_id', 'n.state as node_state', 'r.instance_type', 'r.rpc_port', 'r.cpu', 'r.memory_bytes', 'r.disk_bytes', 'r.host_key', 'r.created_at')) as Array<Record<string, unknown>>
  const reservations: HostReservationView[] = rows.map((r) => ({
    node_id: String(r.node_id),
    node_state: (r.node_state as string | null) ?? null,
    instance_type: String(r.instance_type),
    rpc_port: Number(r.rpc_port),
    cpu: Number(r.cpu),
    memory_bytes: Number(r.memory_bytes),
    disk_bytes: Number(r.disk_bytes),
    host_key: String(r.host_key),
    created_at: toDate(r.created_at).toISOString(),
  }))
  const used = reservations.reduce((sum, r) => ({ cpu: sum.cpu + r.cpu, memory_bytes: sum.memory_bytes + r.memory_bytes, disk_bytes: sum.disk_bytes + r.disk_bytes, nodes: sum.nodes + 1 }), {
    cpu: 0,
    memory_bytes: 0,
    disk_bytes: 0,
    nodes: 0,
  })
  const free = {
    cpu: Math.max(0, host.capacity.cpu - used.cpu),
    memory_bytes: Math.max(0, host.capacity.memory_bytes - used.memory_bytes),
    disk_bytes: Math.max(0, host.capacity.disk_bytes - used.disk_bytes),
  }
  const drain = await latestDrainOf(db, host.id)
  return { ...host, reservations, used, free, drain: drain ? { ...drain, nodes_left: await countLiveNodesOnHost(db, host.id) } : null }
}
