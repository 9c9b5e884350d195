/**
 * Superseded (issue 19; docs/node-agent.md, "Fencing"): a gateway refused this agent — its token
 * was replaced by a migration, or revoked, or its node is retired. The node runs elsewhere now (or
 * nowhere), so this host's copy must never start again: the chain is stopped for good and what a
 * destroyed host would lose is removed (the chain's data, its keys, configs, releases, backups,
 * journals, the agent key), leaving `superseded.json` so that an agent started again on this
 * directory exits at once instead of starting the chain. The agent then exits 77, which systemd's
 * `RestartPreventExitStatus=77` does not restart.
 */
import fs from 'node:fs'
import path from 'node:path'
import type { Logger } from '../log.js'
import { fenceFile } from './fence.js'
import { writeFileAtomic, type StateDir } from './state-dir.js'
import type { ChainSupervisor } from './supervisor.js'

/** The agent exits with this when superseded or refused: systemd must not restart it. */
export const SUPERSEDED_EXIT_CODE = 77

export interface SupersededRecord {
  superseded_at: string
  reason: string
}

export function supersededFile(dir: StateDir | string): string {
  return path.join(typeof dir === 'string' ? dir : dir.root, 'superseded.json')
}

export function readSupersededRecord(stateRoot: string): SupersededRecord | undefined {
  try {
    return JSON.parse(fs.readFileSync(supersededFile(stateRoot), 'utf8')) as SupersededRecord
  } catch {
    return undefined
  }
}

/** What a destroyed host loses; `agent.pid` stays until the agent exits (the claim's release). */
function nodeStatePaths(dir: StateDir): string[] {
  return [
    dir.dataDir,
    dir.keysDir,
    dir.configDir,
    dir.releasesDir,
    dir.backupsDir,
    dir.downloadsDir,
    dir.commandsDir,
    dir.activeFile,
    dir.agentKeyFile,
    dir.pidFile,
    path.join(dir.root, 'chain.wanted'),
    path.join(dir.root, 'key-restores.json'),
    fenceFile(dir),
  ]
}

/**
 * Stops the chain for good (fenced first, so nothing can start it meanwhile), records why, then
 * removes the node's state. The record is written before the removal: an agent killed half-way
 * still finds it and never starts what is left.
 */
export async function retireSupersededHost(options: { stateDir: StateDir; supervisor: ChainSupervisor; logger: Logger; reason: string; graceMs: number }): Promise<void> {
  const { stateDir, supervisor, logger, reason } = options
  const pid = supervisor.status().pid ?? null
  await supervisor.fence(options.graceMs)
  const record: SupersededRecord = { superseded_at: new Date().toISOString(), reason }
  writeFileAtomic(supersededFile(stateDir), JSON.stringify(record, null, 2), 0o600)
  for (const target of nodeStatePaths(stateDir)) fs.rmSync(target, { recursive: true, force: true })
  logger.warn({ reason, stopped_pid: pid }, 'superseded: the agent-gateway refused this agent; the chain is stopped for good and the node state on this host removed')
}
