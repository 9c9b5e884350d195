/**
 * One agent per state directory: two would fight over the chain process (each reaps the other's
 * as an orphan). The agent records its pid in `agent.pid`; the local provider also reads it to
 * stop an agent whose creator died before recording it.
 */
import fs from 'node:fs'
import path from 'node:path'
import { ConflictError } from '../errors.js'
import { writeFileAtomic, type StateDir } from './state-dir.js'

export function agentPidFile(stateRoot: string): string {
  return path.join(stateRoot, 'agent.pid')
}

export function readAgentPid(stateRoot: string): number | undefined {
  try {
    const pid = Number.parseInt(fs.readFileSync(agentPidFile(stateRoot), 'utf8'), 10)
    return Number.isInteger(pid) && pid > 0 ? pid : undefined
  } catch {
    return undefined
  }
}

/** Alive, not a zombie, and a node agent (a pid reused by another program after a reboot is not). */
export function isNodeAgentProcess(pid: number): boolean {
  try {
    process.kill(pid, 0)
  } catch {
    return false
  }
  try {
    if (/\) Z /.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8'))) return false
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('node-agent')
  } catch {
    return true
  }
}

export function claimStateDir(dir: StateDir): { release(): void } {
  const file = agentPidFile(dir.root)
  const other = readAgentPid(dir.root)
  if (other !== undefined && other !== process.pid && isNodeAgentProcess(other)) {
    throw new ConflictError(`another node agent (pid ${other}) runs on ${dir.root}`, 'stop it first: two agents on one state directory would fight over the chain process')
  }
  writeFileAtomic(file, `${process.pid}\n`, 0o600)
  return {
    release() {
      if (readAgentPid(dir.root) === process.pid) fs.rmSync(file, { force: true })
    },
  }
}
