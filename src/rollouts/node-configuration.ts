/**
 * The configuration a rollout's node change sends with a version (docs/rollouts.md, "A node's
 * configuration follows its version"): shared by the rollout and rollout-group workflows.
 */
import type { Db } from '../db/knex.js'
import type { Logger } from '../log.js'
import type { ChainCatalogue } from '../config/chains.js'
import { installedConfigChanges, renderInstalledConfiguration, rpcHostOf } from '../provisioning/configure.js'
import { rollBackNode, type NodeUpgradeDeps, type UpgradeTarget } from './node-upgrade.js'
import { fromJson } from '../db/dialect.js'
import type { RolloutNodeRecord, RolloutRecord } from './store.js'

interface ConfigurationDeps {
  db: Db
  catalogue: () => ChainCatalogue
  logger: Logger
}

/**
 * What a rollback (or the revert after a failed validation) of a rollout that changed the
 * configuration puts back with the previous version: the configuration that version ran (the
 * profile's templates, with the config changes of the rollout that had installed it, if any).
 * Nothing when the rollout changed only the binary.
 */
export async function previousConfiguration(
  deps: ConfigurationDeps,
  r: RolloutRecord,
  nodeId: string,
  previousVersion: string,
  /** The port the node's configuration was rendered with, when the caller has read it already. */
  rpcPort?: number,
): Promise<Pick<UpgradeTarget, 'configFiles' | 'configVersion' | 'run'>> {
  if (!r.manifest?.config_changes) return {}
  const profile = deps.catalogue().profiles.get(r.chain_profile_id)
  if (!profile) return {}
  const changes = await installedConfigChanges(deps.db, nodeId, previousVersion, r.id)
  try {
    const config = renderInstalledConfiguration(
      profile,
      r.node_type,
      { rpc_port: rpcPort ?? (await rpcPortOf(deps.db, nodeId)), rpc_host: await rpcHostOf(deps.db, nodeId), node_id: nodeId, version: previousVersion },
      changes,
    )
    return { configFiles: config.files, configVersion: config.config_version ?? null, run: config.run }
  } catch (err) {
    deps.logger.warn({ node_id: nodeId, version: previousVersion, err: (err as Error).message }, 'rollback: cannot render the previous configuration; only the binary goes back')
    return {}
  }
}

/** The port the node's current configuration was rendered with (its latest configure). */
export async function rpcPortOf(db: Db, nodeId: string): Promise<number> {
  const row = (await db('agent_commands').where({ node_id: nodeId, type: 'configure', status: 'completed' }).orderBy('created_at', 'desc').first('payload')) as { payload: unknown } | undefined
  return (row ? fromJson<{ rpc_port?: number }>(row.payload).rpc_port : undefined) ?? 8545
}

/**
 * Rolls these nodes of rollout `r` back to the version each ran before it, with that version's
 * configuration, in parallel (a full rollback's batch, a group's component). A node without a
 * recorded previous version and artifact is left as it is.
 */
export async function rollBackRolloutNodes(deps: NodeUpgradeDeps, r: RolloutRecord, nodes: readonly RolloutNodeRecord[], heartbeat: () => void): Promise<void> {
  await Promise.all(
    nodes.map(async (n) => {
      if (!n.previous_version || !n.previous_binary_url || !n.previous_checksum) return undefined
      const previous = { version: n.previous_version, url: n.previous_binary_url, checksum: n.previous_checksum }
      const config = await previousConfiguration(deps, r, n.node_id, previous.version)
      const target: UpgradeTarget = { rolloutId: r.id, chainProfileId: r.chain_profile_id, binaryName: r.binary_name, ...previous, ...config, healthWaitMs: r.health_wait_duration_ms }
      return rollBackNode(deps, target, { id: n.id, nodeId: n.node_id }, heartbeat)
    }),
  )
}
