/**
 * What the CLI may take from a `nodeplane up` running for the current data directory: its API
 * URL and, as the last resort for a credential, its admin key file (`admin_api_key_file`).
 *
 * Only the stack.json of the current data dir counts, and only when it describes that same dir
 * (a stack.json copied or checked in from elsewhere is ignored). The key is read only from
 * `<data dir>/admin-api-key` itself, never from another path named in the file, and only when it
 * is private to this user and looks like an API key: a planted stack.json cannot make the CLI
 * read some other file and send it as a bearer token.
 */
import fs from 'node:fs'
import path from 'node:path'
import type { Env } from '../config/env.js'
import { adminApiKeyPath, readStackFile } from '../daemon/stack-file.js'
import { assertPrivate } from './credentials.js'

const API_KEY_SHAPE = /^np_[A-Za-z0-9_-]{43}$/

export interface LocalStack {
  dataDir: string
  apiUrl: string
  /** Reads the admin key; undefined when the stack has none usable. Throws when the file is unsafe. */
  adminKey(): string | undefined
}

/** The data directory commands use: --data-dir, NODEPLANE_DATA_DIR, or ./.nodeplane. */
export function currentDataDir(env: Env): string {
  return path.resolve(env.NODEPLANE_DATA_DIR || './.nodeplane')
}

export function readLocalStack(env: Env): LocalStack | undefined {
  const dataDir = currentDataDir(env)
  const stack = readStackFile(dataDir)
  if (!stack || typeof stack.api_url !== 'string' || typeof stack.data_dir !== 'string') return undefined
  if (!samePath(stack.data_dir, dataDir)) return undefined
  const named = typeof stack.admin_api_key_file === 'string' ? stack.admin_api_key_file : undefined
  const keyFile = adminApiKeyPath(dataDir)
  return {
    dataDir,
    apiUrl: stack.api_url,
    adminKey() {
      if (!named || !samePath(named, keyFile)) return undefined
      let stat: fs.Stats
      try {
        stat = fs.statSync(keyFile)
      } catch {
        return undefined
      }
      assertPrivate(keyFile, stat)
      const key = fs.readFileSync(keyFile, 'utf8').trim()
      return API_KEY_SHAPE.test(key) ? key : undefined
    },
  }
}

function samePath(a: string, b: string): boolean {
  return realpath(a) === realpath(b)
}

function realpath(p: string): string {
  try {
    return fs.realpathSync(p)
  } catch {
    return path.resolve(p)
  }
}
