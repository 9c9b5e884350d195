/**
 * The SSH pool (src/hosts/ssh-pool.ts) and remote file writes against a real sshd in a network
 * namespace: one connection reused, bounded sessions per host, a timed-out command not leaving a
 * dead connection behind, host-key pinning, stdin, and files written whole with their mode.
 * No database: nothing here differs between SQLite and Postgres.
 */
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ValidationError } from '../../../src/errors.js'
import { writeRemoteFile } from '../../../src/hosts/remote-files.js'
import { createSshPool, HostKeyMismatchError, SshTimeoutError, type SshPool, type SshTarget } from '../../../src/hosts/ssh-pool.js'
import { startNetnsHost, type NetnsHost } from '../../helpers/netns.js'

let host: NetnsHost
let pool: SshPool
let target: SshTarget
beforeAll(async () => {
  host = await startNetnsHost()
  pool = createSshPool({ connectTimeoutMs: 3_000, maxSessionsPerHost: 2 })
  target = { id: 'h1', address: host.address, port: host.port, user: 'root', privateKey: host.privateKey, hostKeyFingerprint: host.hostKeyFingerprint }
})
afterAll(async () => {
  await pool?.close()
  await host?.stop()
})

describe('SSH pool', () => {
  it('reuses one connection per host and runs at most maxSessionsPerHost commands at once', async () => {
    const log = path.join(host.rootDir, 'sessions.log')
    // Each command appends its start and end; the file's order shows how many overlapped.
    const results = await Promise.all(Array.from({ length: 6 }, (_, i) => pool.exec(target, `echo "+ $PPID" >> ${log}; sleep 0.2; echo "- ${i}" >> ${log}; echo $SSH_CONNECTION`)))
    expect(results.every((r) => r.code === 0)).toBe(true)
    // One TCP connection: every command saw the same client port.
    expect(new Set(results.map((r) => r.stdout.trim())).size).toBe(1)
    let running = 0
    let most = 0
    for (const line of fs.readFileSync(log, 'utf8').trim().split('\n')) {
      running += line.startsWith('+') ? 1 : -1
      most = Math.max(most, running)
    }
    expect(most).toBe(2)
  })

  it('passes stdin, reports exit codes, and drops the connection of a command that timed out', async () => {
    expect(await pool.exec(target, 'wc -c; exit 3', { stdin: 'hello' })).toMatchObject({ code: 3, stdout: expect.stringMatching(/^5\s*$/) })
    const before = (await pool.exec(target, 'echo $SSH_CONNECTION')).stdout
    await expect(pool.exec(target, 'sleep 30', { timeoutMs: 300 })).rejects.toThrow(SshTimeoutError)
    const after = await pool.exec(target, 'echo $SSH_CONNECTION')
    expect(after.code).toBe(0)
    expect(after.stdout).not.toBe(before)
  })

  it('after a command timed out on a host that stopped answering, the next command opens a new connection', async () => {
    // The sshd process serving the pooled connection (the parent of our shell) freezes: the
    // kernel still acknowledges packets, nothing answers them, as on a hung host.
    const sessionPid = Number((await pool.exec(target, 'echo $PPID')).stdout.trim())
    process.kill(sessionPid, 'SIGSTOP')
    try {
      await expect(pool.exec(target, 'true', { timeoutMs: 300 })).rejects.toThrow(SshTimeoutError)
      // The listener still accepts: a new connection works, the frozen one must not be reused.
      expect(await pool.exec(target, 'echo back', { timeoutMs: 5_000 })).toMatchObject({ code: 0, stdout: 'back\n' })
    } finally {
      process.kill(sessionPid, 'SIGCONT')
    }
  })

  it('refuses a host presenting another key than the pinned one, naming both', async () => {
    const wrong = `SHA256:${'C'.repeat(43)}`
    const err = await pool.connect({ ...target, id: 'h2', hostKeyFingerprint: wrong }).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(HostKeyMismatchError)
    expect((err as Error).message).toContain(`pinned ${wrong}, presented ${host.hostKeyFingerprint}`)
    // Without a pin the key is reported for pinning.
    expect(await pool.connect({ ...target, id: 'h3', hostKeyFingerprint: undefined })).toBe(host.hostKeyFingerprint)
  })

  it('writes a file whole with its mode, over an existing one, and refuses a path it cannot quote', async () => {
    const file = path.join(host.rootDir, 'node-1', 'agent-token')
    fs.mkdirSync(path.dirname(file))
    fs.writeFileSync(file, 'old token, longer than the new one')
    await writeRemoteFile(pool, target, file, 'new-token', 0o600)
    expect(fs.readFileSync(file, 'utf8')).toBe('new-token')
    expect(fs.statSync(file).mode & 0o777).toBe(0o600)
    expect(fs.readdirSync(path.dirname(file))).toEqual(['agent-token'])
    const big = Buffer.alloc(1024 * 1024, 7)
    await writeRemoteFile(pool, target, path.join(host.rootDir, 'node-1', 'agent.mjs'), big, 0o644)
    expect(fs.readFileSync(path.join(host.rootDir, 'node-1', 'agent.mjs')).equals(big)).toBe(true)
    await expect(writeRemoteFile(pool, target, "/tmp/x'; rm -rf /", 'x', 0o600)).rejects.toThrow(ValidationError)
    await expect(writeRemoteFile(pool, target, path.join(host.rootDir, 'missing-dir', 'f'), 'x', 0o600)).rejects.toThrow(/could not write/)
  })
})
