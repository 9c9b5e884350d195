import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { credentialsPath, readCredentials, removeCredentials, writeCredentials } from '../../../src/cli/credentials.js'

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
    const file = writeCredentials({ api_url: 'http://127.0.0.1:8080', api_key: 'np_secret' }, env)
    expect(fs.statSync(file).mode & 0o777).toBe(0o600)
    expect(fs.statSync(path.dirname(file)).mode & 0o777).toBe(0o700)
    expect(readCredentials(env)).toEqual({ api_url: 'http://127.0.0.1:8080', api_key: 'np_secret' })
    expect(fs.readdirSync(path.dirname(file))).toEqual(['credentials.json'])
  })

  it('refuses a file that group or others can read, naming the file and the fix', () => {
    const env = { HOME: home() }
    const file = writeCredentials({ api_url: 'http://127.0.0.1:8080', api_key: 'np_secret' }, env)
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
    expect(removeCredentials(env)).toBe(false)
    const file = writeCredentials({ api_url: 'http://x', api_key: 'k' }, env)
    fs.writeFileSync(file, '{"api_url": 1}')
    expect(() => readCredentials(env)).toThrow(/lacks api_url or api_key/)
    expect(removeCredentials(env)).toBe(true)
    expect(fs.existsSync(file)).toBe(false)
  })
})
