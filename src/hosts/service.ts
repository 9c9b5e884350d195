/**
 * The host fleet's operations (docs/infrastructure.md, "Hosts"): add (connect, pin the host key,
 * check prerequisites, then record), and the operator's state moves.
 *
 * `addHost` does every SSH check before it writes anything: a host that cannot be reached, that
 * refuses the key, presents another host key than the one given, or lacks a prerequisite leaves
 * no row and no key file. The row and the key file are written together: the key first inside the
 * row's transaction, and removed again when the transaction does not commit.
 */
import { isUuid, uuidv7 } from '../db/ids.js'
import { isUniqueViolation } from '../db/errors.js'
import type { Db, Queryable } from '../db/knex.js'
import { ConflictError, NotFoundError, ValidationError } from '../errors.js'
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
 * otherwise it stays `draining` (moving nodes off comes with placement). `remove` refuses a
 * host that still has nodes, and forgets its SSH key.
 */
export async function moveHost(fleet: Pick<HostFleet, 'db' | 'now'> & { keys?: SshKeyStore; pool?: SshPool }, ref: string, action: OperatorHostAction): Promise<Host> {
  const now = fleet.now ?? (() => new Date())
  const result = await fleet.db.transaction(async (trx) => {
    const host = await resolveHost(trx, ref)
    const already = (action === 'cordon' && host.state === 'cordoned') || (action === 'uncordon' && host.state === 'ready') || (action === 'drain' && host.state === 'draining')
    if (already && action !== 'drain') return host
    let steps: HostAction[] = already ? [] : [action]
    if (action === 'remove' || action === 'drain') {
      const nodes = await countLiveNodesOnHost(trx, host.id)
      if (action === 'remove' && nodes > 0) throw new ConflictError(`host ${host.name} has ${nodes} node(s)`, `drain it first (nodeplane host drain --host ${host.name}); a host is removed only when no node is on it`)
      if (action === 'drain' && nodes === 0) steps = [...steps, 'drained']
    }
    let state = host.state
    for (const step of steps) state = nextHostState(state, step, host.name)
    if (state === host.state) return host
    if (!(await updateHostState(trx, host, state, now()))) throw new ConflictError('host changed', `host ${host.name} changed meanwhile; try again`)
    return (await findHostById(trx, host.id)) as Host
  })
  if (action === 'remove' && result.state === 'removed') {
    await fleet.keys?.remove(result.id)
    fleet.pool?.drop(result.id)
  }
  return result
}
