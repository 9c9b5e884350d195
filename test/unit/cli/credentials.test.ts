import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { credentialsPath, readCredentials, readCredentialsFile, removeCredentials, useContext, writeCredentials } from '../../../src/cli/credentials.js'
import { NotFoundError, ValidationError } from '../../../src/errors.js'

describe('stored login (credentials.json)', () => {
  const dirs: string[] = []
  const home = () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-cred-'))
    dirs.push(dir)
    return dir
  }
  afterEach(() => dirs.splice(0).forEach((d) => fs.rmSync(d, { recursive: true, force: true })))

  it('lives under XDG_CONFIG_HOME, else ~/.config; a relative XDG_CONFIG_HOME is ignored', () => {
    expect(credentialsPath({ HOME: '/home/me', XDG_CONFIG_HOME: '/xdg' })).toBe('/xdg/nodeplane/credentials.json')
    expect(credentialsPath({ HOME: '/home/me' })).toBe('/home/me/.config/nodeplane/credentials.json')
    expect(credentialsPath({ HOME: '/home/me', XDG_CONFIG_HOME: 'relative' })).toBe('/home/me/.config/nodeplane/credentials.json')
  })

  it('is written 0600 in a 0700 directory (even an existing, wider one) and read back', () => {
    const env = { HOME: home() }
    fs.mkdirSync(path.join(env.HOME, '.config', 'nodeplane'), { recursive: true, mode: 0o755 })
    const { file } = writeCredentials({ api_url: 'http://127.0.0.1:8080', api_key: 'np_secret' }, env)
    expect(fs.statSync(file).mode & 0o777).toBe(0o600)
    expect(fs.statSync(path.dirname(file)).mode & 0o777).toBe(0o700)
    expect(readCredentials(env)).toEqual({ api_url: 'http://127.0.0.1:8080', api_key: 'np_secret', context: 'default' })
    expect(fs.readdirSync(path.dirname(file))).toEqual(['credentials.json'])
  })

  it('refuses a file that group or others can read, naming the file and the fix', () => {
    const env = { HOME: home() }
    const { file } = writeCredentials({ api_url: 'http://127.0.0.1:8080', api_key: 'np_secret' }, env)
    fs.chmodSync(file, 0o644)
    expect(() => readCredentials(env)).toThrow(/refusing to use .*credentials\.json: its mode is 0644/)
    try {
      readCredentials(env)
    } catch (err) {
      expect((err as { details: string }).details).toContain('chmod 600')
      expect(String((err as Error).message)).not.toContain('np_secret')
    }
  })

  it('is absent before login and after logout; a broken file says to log in again', () => {
    const env = { HOME: home() }
    expect(readCredentials(env)).toBeUndefined()
    expect(removeCredentials(env).removed).toBe(false)
    const { file } = writeCredentials({ api_url: 'http://x', api_key: 'k' }, env)
    expect(removeCredentials(env)).toEqual({ removed: true, context: 'default' })
    expect(fs.existsSync(file)).toBe(false)
    fs.mkdirSync(path.dirname(file), { recursive: true })
    fs.writeFileSync(file, '{"api_url": 1}', { mode: 0o600 })
    expect(() => readCredentials(env)).toThrow(/lacks api_url or api_key/)
    fs.writeFileSync(file, '{"contexts": {"prod": {"api_url": "http://p"}}, "current_context": "prod"}')
    expect(() => readCredentials(env)).toThrow(/context "prod" lacks api_url or api_key/)
  })

  it('keeps one login per named context; the first becomes current, later ones only by context use', () => {
    const env = { HOME: home() }
    expect(writeCredentials({ api_url: 'http://prod', api_key: 'kp' }, env, 'prod').current).toBe('prod')
    expect(writeCredentials({ api_url: 'http://staging', api_key: 'ks' }, env, 'staging').current).toBe('prod')
    expect(readCredentials(env)).toEqual({ api_url: 'http://prod', api_key: 'kp', context: 'prod' })
    expect(readCredentials({ ...env, NODEPLANE_CONTEXT: 'staging' })).toEqual({ api_url: 'http://staging', api_key: 'ks', context: 'staging' })
    useContext('staging', env)
    expect(readCredentials(env)?.context).toBe('staging')
    expect(readCredentialsFile(env)).toEqual({
      current_context: 'staging',
      contexts: { prod: { api_url: 'http://prod', api_key: 'kp' }, staging: { api_url: 'http://staging', api_key: 'ks' } },
    })
    // A named context that does not exist never falls back to another one.
    expect(() => readCredentials({ ...env, NODEPLANE_CONTEXT: 'prdo' })).toThrow(NotFoundError)
    expect(() => useContext('prdo', env)).toThrow(/no context "prdo"/)
    expect(() => readCredentials({ ...env, NODEPLANE_CONTEXT: '../x' })).toThrow(ValidationError)
    // Names of an object's own machinery are contexts like any other: none exists here.
    for (const name of ['constructor', 'toString', 'hasOwnProperty']) {
      expect(() => readCredentials({ ...env, NODEPLANE_CONTEXT: name })).toThrow(NotFoundError)
      expect(() => useContext(name, env)).toThrow(`no context "${name}"`)
      expect(removeCredentials(env, name)).toEqual({ removed: false, context: name })
    }
    // Removing the current context leaves none current; commands then have no login.
    expect(removeCredentials(env, 'staging')).toEqual({ removed: true, context: 'staging' })
    expect(readCredentials(env)).toBeUndefined()
    expect(readCredentials({ ...env, NODEPLANE_CONTEXT: 'prod' })?.api_key).toBe('kp')
  })

  it('reads a single-login file from before contexts as the context "default", and rewrites it on the next login', () => {
    const env = { HOME: home() }
    const file = credentialsPath(env)
    fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 })
    fs.writeFileSync(file, JSON.stringify({ api_url: 'http://old', api_key: 'k_old' }), { mode: 0o600 })
    expect(readCredentials(env)).toEqual({ api_url: 'http://old', api_key: 'k_old', context: 'default' })
    writeCredentials({ api_url: 'http://prod', api_key: 'kp' }, env, 'prod')
    expect(JSON.parse(fs.readFileSync(file, 'utf8'))).toEqual({
      current_context: 'default',
      contexts: { default: { api_url: 'http://old', api_key: 'k_old' }, prod: { api_url: 'http://prod', api_key: 'kp' } },
    })
    expect(fs.statSync(file).mode & 0o777).toBe(0o600)
  })
})
