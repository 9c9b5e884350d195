/**
 * Where `nodeplane up` writes its JSON logs. On a terminal they would bury the status a person
 * reads, so they go to `<data dir>/logs/up.log` (appended, one JSON object per line, as on
 * stdout); `--log-format json` keeps them on stdout, as the daemons and scripts want them.
 */
import fs from 'node:fs'
import path from 'node:path'
import { destination } from 'pino'
import type { Logger } from '../log.js'

export const UP_LOG_FORMATS = ['auto', 'json', 'file'] as const
export type UpLogFormat = (typeof UP_LOG_FORMATS)[number]

export function upLogFile(dataDir: string): string {
  return path.join(dataDir, 'logs', 'up.log')
}

/** The log file to write to, or undefined for stdout: `auto` means the file on a terminal. */
export function upLogTarget(formatFlag: UpLogFormat, dataDir: string, interactive: boolean): string | undefined {
  if (formatFlag === 'json' || (formatFlag === 'auto' && !interactive)) return undefined
  return upLogFile(dataDir)
}

/** A synchronous appending stream (no exit flush to lose), the directory private to the user. */
export function openLogFile(file: string): ReturnType<typeof destination> {
  fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 })
  return destination({ dest: file, sync: true, append: true })
}
