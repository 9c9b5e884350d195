/**
 * `<data dir>/stack.json`: what `nodeplane up` started and where, for people and scripts in
 * another terminal. Written when every daemon is ready, removed on stop.
 */
import fs from 'node:fs'
import path from 'node:path'

export interface StackFile {
  pid: number
  started_at: string
  data_dir: string
  daemons: string[]
  api_url: string
  database_url: string
  payments_database_url: string
  bus: 'local' | 'nats'
  [extra: string]: unknown
}

export function stackFilePath(dataDir: string): string {
  return path.join(dataDir, 'stack.json')
}

export function writeStackFile(dataDir: string, stack: StackFile): void {
  const file = stackFilePath(dataDir)
  const tmp = `${file}.${process.pid}.tmp`
  fs.writeFileSync(tmp, `${JSON.stringify(stack, null, 2)}\n`, { mode: 0o644 })
  fs.renameSync(tmp, file)
}

export function readStackFile(dataDir: string): StackFile | undefined {
  try {
    return JSON.parse(fs.readFileSync(stackFilePath(dataDir), 'utf8')) as StackFile
  } catch {
    return undefined
  }
}

/** Removes the file only if it is ours (another `up` may have replaced a stale one). */
export function removeStackFile(dataDir: string, pid = process.pid): void {
  const current = readStackFile(dataDir)
  if (current && current.pid !== pid) return
  fs.rmSync(stackFilePath(dataDir), { force: true })
}

export function isProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM'
  }
}
