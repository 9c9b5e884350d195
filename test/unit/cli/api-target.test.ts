import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { normalizeApiUrl, resolveApiTarget } from '../../../src/cli/api-target.js'
import { writeCredentials } from '../../../src/cli/credentials.js'
import { writeAdminApiKeyFile, writeStackFile, type StackFile } from '../../../src/daemon/stack-file.js'
import { ConfigError, UnauthorizedError, ValidationError } from '../../../src/errors.js'

const STACK_KEY = `np_${'s'.repeat(43)}`
const LOGIN_KEY = `np_${'l'.repeat(43)}`

describe('API URL and credential resolution', () => {
  const dirs: string[] = []
  afterEach(() => dirs.splice(0).forEach((d) => fs.rmSync(d, { recursive: true, force: true })))

  function setup(options: { login?: string; stack?: Partial<StackFile> | false } = {}) {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-target-'))
    dirs.push(root)
    const dataDir = path.join(root, 'data')
    fs.mkdirSync(dataDir)
    const env = { HOME: path.join(root, 'home'), NODEPLANE_DATA_DIR: dataDir }
    if (options.login) writeCredentials({ api_url: options.login, api_key: LOGIN_KEY }, env)
    if (options.stack !== false) {
      const keyFile = writeAdminApiKeyFile(dataDir, STACK_KEY)
      writeStackFile(dataDir, {
        pid: process.pid,
        started_at: new Date().toISOString(),
        data_dir: dataDir,
        daemons: ['auth-server', 'api-server'],
        api_url: 'http://127.0.0.1:18080',
        auth_url: 'http://127.0.0.1:18081',
        admin_api_key_file: keyFile,
        database_url: 'sqlite:///x',
        payments_database_url: 'sqlite:///y',
        bus: 'local',
        ...(options.stack ?? {}),
      })
    }
    return { env, dataDir }
  }

  it('on a laptop after `nodeplane up`: the URL and the admin key of the data dir stack', () => {
    const { env } = setup()
    expect(resolveApiTarget({ env, requireKey: true })).toEqual({
      url: 'http://127.0.0.1:18080',
      urlSource: 'stack',
      credential: { key: STACK_KEY, source: 'stack' },
    })
  })

  it('flag beats env beats login beats stack for the URL; env key beats the stored one', () => {
    const { env } = setup({ login: 'https://login.example.com' })
    expect(resolveApiTarget({ env }).url).toBe('https://login.example.com')
    expect(resolveApiTarget({ env }).credential).toEqual({ key: LOGIN_KEY, source: 'login', context: 'default' })
    const withEnv = { ...env, NODEPLANE_API_URL: 'https://env.example.com/api/v1/', NODEPLANE_API_KEY: 'np_from_env' }
    expect(resolveApiTarget({ env: withEnv })).toMatchObject({ url: 'https://env.example.com', urlSource: 'env', credential: { key: 'np_from_env', source: 'env' } })
    expect(resolveApiTarget({ env: withEnv, apiUrl: 'http://flag.example.com:9000' })).toMatchObject({ url: 'http://flag.example.com:9000', urlSource: 'flag' })
  })

  it('never sends the stored login key, nor the stack key, to another API than theirs', () => {
    const { env } = setup({ login: 'https://login.example.com' })
    const elsewhere = resolveApiTarget({ env, apiUrl: 'https://other.example.com' })
    expect(elsewhere.credential).toBeUndefined()
    expect(() => resolveApiTarget({ env, apiUrl: 'https://other.example.com', requireKey: true })).toThrow(UnauthorizedError)
    // The stack's URL asked for explicitly: its key applies (the login is for another URL).
    expect(resolveApiTarget({ env, apiUrl: 'http://127.0.0.1:18080/' }).credential).toEqual({ key: STACK_KEY, source: 'stack' })
  })

  it('ignores a stack.json written for another data dir, and a key file other than <data dir>/admin-api-key', () => {
    const other = setup({ stack: { data_dir: '/somewhere/else' } })
    expect(() => resolveApiTarget({ env: other.env })).toThrow(ConfigError)
    const planted = setup({ stack: { admin_api_key_file: '/etc/passwd' } })
    expect(resolveApiTarget({ env: planted.env })).toEqual({ url: 'http://127.0.0.1:18080', urlSource: 'stack' })
  })

  it('does not read (nor fail over) a stored login that env variables make irrelevant', () => {
    const { env } = setup({ login: 'https://login.example.com' })
    fs.chmodSync(path.join(env.HOME, '.config', 'nodeplane', 'credentials.json'), 0o644)
    expect(() => resolveApiTarget({ env })).toThrow(/its mode is 0644/)
    const ci = { ...env, NODEPLANE_API_URL: 'https://ci.example.com', NODEPLANE_API_KEY: 'np_ci' }
    expect(resolveApiTarget({ env: ci, requireKey: true })).toMatchObject({ url: 'https://ci.example.com', credential: { source: 'env' } })
  })

  it('refuses an admin key file that others can read', () => {
    const { env, dataDir } = setup()
    fs.chmodSync(path.join(dataDir, 'admin-api-key'), 0o644)
    expect(() => resolveApiTarget({ env, requireKey: true })).toThrow(/its mode is 0644/)
  })

  it('says how to get a URL when there is none, and rejects a bad one by where it came from', () => {
    const { env } = setup({ stack: false })
    expect(() => resolveApiTarget({ env })).toThrow(/NODEPLANE_API_URL: not set, no stored login, and no `nodeplane up` running/)
    expect(() => resolveApiTarget({ env: { ...env, NODEPLANE_API_URL: 'ftp://x' } })).toThrow(ConfigError)
    expect(() => resolveApiTarget({ env, apiUrl: 'not a url' })).toThrow(ValidationError)
  })

  it('normalizes base URLs', () => {
    expect(normalizeApiUrl('https://api.example.com/', 'flag')).toBe('https://api.example.com')
    expect(normalizeApiUrl('https://api.example.com/np/api/v1', 'flag')).toBe('https://api.example.com/np')
    expect(() => normalizeApiUrl('https://user:pw@api.example.com', 'flag')).toThrow(/must not carry credentials/)
  })
})
