/**
 * What a host must have before the `ssh` provider can place nodes on it (docs/infrastructure.md,
 * "Prerequisites"): Node.js >= 20.19 on the login's PATH (the node-agent bundle is one file run
 * by it), its root directory existing and writable by the SSH user, and enough free disk there.
 * One SSH command gathers all three, so `host add` reports every missing thing at once.
 */
import type { SshPool, SshTarget } from './ssh-pool.js'

export const MIN_NODE_VERSION: readonly [number, number] = [20, 19]

export interface PrerequisiteReport {
  nodeVersion: string | null
  rootDir: string
  rootDirState: 'writable' | 'read-only' | 'missing'
  freeDiskBytes: number | null
  /** One line per unmet prerequisite, saying what to do; empty when the host is fit. */
  missing: string[]
}

/** The root directory is interpolated into a shell command: only plain absolute paths pass validation. */
export const ROOT_DIR_PATTERN = /^\/[A-Za-z0-9._/-]{0,254}$/

function script(rootDir: string): string {
  return [
    'v=$(node --version 2>/dev/null) || v=none',
    'echo "node=$v"',
    `r='${rootDir}'`,
    'if [ ! -d "$r" ]; then echo root=missing',
    'elif t=$(mktemp -p "$r" .nodeplane-write-check.XXXXXX 2>/dev/null) && rm -f "$t"; then echo root=writable',
    'else echo root=read-only; fi',
    'd="$r"; while [ ! -d "$d" ]; do d=$(dirname "$d"); done',
    'echo "free_kb=$(df -Pk "$d" 2>/dev/null | awk \'NR==2 {print $4}\')"',
  ].join('\n')
}

function nodeVersionOk(version: string): boolean {
  const match = /^v(\d+)\.(\d+)\./.exec(version)
  if (!match) return false
  const major = Number(match[1])
  const minor = Number(match[2])
  return major > MIN_NODE_VERSION[0] || (major === MIN_NODE_VERSION[0] && minor >= MIN_NODE_VERSION[1])
}

function gib(bytes: number): string {
  return `${(bytes / 2 ** 30).toFixed(1)} GiB`
}

export async function checkPrerequisites(pool: SshPool, target: SshTarget, rootDir: string, minFreeDiskBytes: number): Promise<PrerequisiteReport> {
  const result = await pool.exec(target, script(rootDir))
  const values = new Map(
    result.stdout
      .split('\n')
      .map((line) => line.trim().split('='))
      .filter((parts): parts is [string, string] => parts.length === 2)
      .map(([k, v]) => [k, v]),
  )
  const nodeVersion = values.get('node') && values.get('node') !== 'none' ? (values.get('node') as string) : null
  const rootDirState = (['writable', 'read-only', 'missing'] as const).find((s) => s === values.get('root')) ?? 'missing'
  const freeKb = Number(values.get('free_kb'))
  const freeDiskBytes = Number.isFinite(freeKb) && values.get('free_kb') !== '' ? freeKb * 1024 : null

  const wanted = `${MIN_NODE_VERSION[0]}.${MIN_NODE_VERSION[1]}`
  const missing: string[] = []
  if (nodeVersion === null) missing.push(`Node.js >= ${wanted} is not on the PATH of ${target.user}'s SSH login (install it, e.g. from NodeSource or the distribution's nodejs package)`)
  else if (!nodeVersionOk(nodeVersion)) missing.push(`Node.js ${nodeVersion} is too old: the node agent needs >= ${wanted}`)
  if (rootDirState === 'missing') missing.push(`the root directory ${rootDir} does not exist (create it, owned by ${target.user}: mkdir -p ${rootDir})`)
  else if (rootDirState === 'read-only') missing.push(`the root directory ${rootDir} is not writable by ${target.user}`)
  if (freeDiskBytes === null) missing.push(`could not read the free disk space under ${rootDir}`)
  else if (freeDiskBytes < minFreeDiskBytes) missing.push(`only ${gib(freeDiskBytes)} free under ${rootDir}; at least ${gib(minFreeDiskBytes)} is needed (HOSTS_MIN_FREE_DISK)`)
  return { nodeVersion, rootDir, rootDirState, freeDiskBytes, missing }
}
