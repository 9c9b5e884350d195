/**
 * `nodeplane host add|list|show|cordon|uncordon|drain|remove` through the built binary against an
 * api-server (the daemon's own start function, in this process) on both databases, with a real
 * sshd in a network namespace (test/helpers/netns.ts): --json output, the table, exit codes and
 * one-line reasons, and flags refused before any request. Few CLI spawns: the API's rules are
 * covered in test/integration/hosts/hosts-api.test.ts.
 */
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startApiServer, type RunningServer } from '../../daemons/api-server.js'
import { createApiKey } from '../../src/auth/api-keys.js'
import { createUser } from '../../src/auth/users.js'
import { createLocalBus } from '../../src/events/local-bus.js'
import type { Host } from '../../src/hosts/store.js'
import { createLogger } from '../../src/log.js'
import { nodeplane, tempDir, type CliResult } from '../helpers/cli.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../helpers/db.js'
import { startNetnsHost, type NetnsHost } from '../helpers/netns.js'

let host: NetnsHost
beforeAll(async () => {
  host = await startNetnsHost()
})
afterAll(async () => host?.stop())

const json = <T>(r: CliResult): T => JSON.parse(r.stdout) as T

describe.each(DIALECTS)('host commands on %s', (dialect) => {
  let t: TestDatabase
  let server: RunningServer
  const dir = tempDir()
  const dataDir = path.join(dir, 'data')
  let env: Record<string, string>
  const run = (args: string[], extra: Record<string, string> = {}) => nodeplane(['host', ...args], { cwd: dir, env: { ...env, ...extra } })

  beforeAll(async () => {
    t = await createTestDatabase(dialect)
    const bus = createLocalBus()
    const started = await startApiServer(
      { API_SERVER_PORT: 0, HTTP_HOST: '127.0.0.1', HTTP_BODY_LIMIT_BYTES: 1024 * 1024, NODEPLANE_DATA_DIR: dataDir, HOSTS_MIN_FREE_DISK: 64 * 2 ** 20, HOSTS_SSH_CONNECT_TIMEOUT: 3_000 },
      { db: t.db, bus, logger: createLogger({ level: 'silent' }) },
    )
    server = { url: started.url, stop: async () => (await started.stop(), await bus.close()) }
    const admin = await createUser(t.db, { email: 'ops@example.test', is_admin: true, external_auth_id: null })
    const { key } = await t.db.transaction((trx) => createApiKey(trx, { userId: admin.id, name: 'ops', scopes: ['admin'], expiresAt: null, allowAdmin: true }, new Date()))
    env = { NODEPLANE_API_URL: server.url, NODEPLANE_API_KEY: key, NODEPLANE_DATA_DIR: dataDir }
  })
  afterAll(async () => {
    await server?.stop()
    await t?.destroy()
    fs.rmSync(dir, { recursive: true, force: true })
  })

  const addArgs = (name: string, extra: string[] = []) => [
    'add',
    '--name', name,
    '--address', host.address,
    '--user', 'root',
    '--ssh-key-file', host.keyFile,
    '--region', 'eu-central',
    '--root-dir', host.rootDir,
    '--capacity', 'cpu=8,memory=32GiB,disk=500GiB',
    '--labels', 'rack=r12,disk=nvme',
    ...extra,
  ]

  it('adds a host with its host key pinned, lists and shows it, cordons, drains and removes it', { timeout: 60_000 }, async () => {
    const added = await run([...addArgs('fra-1', ['--host-key-fingerprint', host.hostKeyFingerprint]), '--json'])
    expect(added.exitCode, added.stderr).toBe(0)
    const h = json<Host>(added)
    expect(h).toMatchObject({
      name: 'fra-1',
      state: 'ready',
      host_key_fingerprint: host.hostKeyFingerprint,
      capacity: { cpu: 8, memory_bytes: 32 * 2 ** 30, disk_bytes: 500 * 2 ** 30 },
      labels: { rack: 'r12', disk: 'nvme' },
    })
    expect(added.stdout).not.toContain('PRIVATE KEY')
    // The key went to the api-server's key directory, readable by its owner only.
    const keyFile = path.join(dataDir, 'secrets', 'ssh', `${h.id}.key`)
    expect(fs.statSync(keyFile).mode & 0o777).toBe(0o600)

    const [list, table, show] = await Promise.all([run(['list', '--json']), run(['list']), run(['show', '--host', 'fra-1', '--json'])])
    expect(json<{ hosts: Host[] }>(list).hosts).toEqual([h])
    expect(table.stdout).toMatch(/NAME\s+STATE\s+REGION\s+ADDRESS/)
    expect(table.stdout).toMatch(/fra-1\s+ready\s+eu-central\s+root@10\.213\.\d+\.2:22\s+cpu=8,memory=32GiB,disk=500GiB/)
    // show adds what is placed on the host: nothing yet, all of it free, no drain.
    expect(json<Host>(show)).toEqual({ ...h, reservations: [], used: { cpu: 0, memory_bytes: 0, disk_bytes: 0, nodes: 0 }, free: h.capacity, drain: null })

    const cordon = await run(['cordon', '--host', 'fra-1'])
    expect(cordon.exitCode, cordon.stderr).toBe(0)
    expect(cordon.stdout.trim()).toBe('Host fra-1 is cordoned.')
    // A repeat: exit 0, one line saying nothing changed.
    const cordonAgain = await run(['cordon', '--host', 'fra-1'])
    expect(cordonAgain.exitCode, cordonAgain.stderr).toBe(0)
    expect(cordonAgain.stdout.trim()).toBe('Host fra-1 was already cordoned; nothing changed.')
    const drain = await run(['drain', '--host', h.id, '--json'])
    expect(json<Host>(drain).state).toBe('cordoned')
    const removed = await run(['remove', '--host', 'fra-1', '--yes', '--json'])
    expect(json<Host>(removed)).toMatchObject({ state: 'removed' })
    expect(fs.existsSync(keyFile)).toBe(false)

    const [gone, uncordonRemoved, drainRemoved, drainUnknown] = await Promise.all([
      run(['show', '--host', 'fra-1']),
      run(['uncordon', '--host', h.id]),
      run(['drain', '--host', h.id]),
      run(['drain', '--host', 'nope']),
    ])
    expect(gone.exitCode).toBe(3)
    expect(gone.stderr).toMatch(/^Error: no host fra-1\n/)
    expect(uncordonRemoved.exitCode).toBe(4)
    expect(uncordonRemoved.stderr).toMatch(/^Error: uncordon applies to a host that is cordoned or draining; host fra-1 is removed$/)
    expect(drainRemoved.exitCode).toBe(4)
    expect(drainRemoved.stderr).toMatch(/^Error: drain applies to a host that is ready or cordoned or unreachable; host fra-1 is removed$/)
    expect(drainUnknown.exitCode).toBe(3)
    expect(drainUnknown.stderr).toMatch(/^Error: no host nope\n/)
  })

  it('says what failed and writes nothing: a changed host key, a missing root directory, bad flags before any request', { timeout: 60_000 }, async () => {
    const other = `SHA256:${'B'.repeat(43)}`
    const [pinned, noRoot] = await Promise.all([
      run(addArgs('pinned', ['--host-key-fingerprint', other])),
      run([...addArgs('noroot').map((a) => (a === host.rootDir ? '/nonexistent/nodeplane' : a)), '--json']),
    ])
    expect(pinned.exitCode).toBe(2)
    expect(pinned.stderr).toContain(`pinned ${other}, presented ${host.hostKeyFingerprint}`)
    expect(noRoot.exitCode).toBe(2)
    expect(json<{ error: { message: string; details: string } }>(noRoot).error).toMatchObject({ message: expect.stringMatching(/^host noroot lacks prerequisites: the root directory \/nonexistent\/nodeplane does not exist/) })

    // No API is needed to refuse these.
    const noApi = { NODEPLANE_API_URL: 'http://127.0.0.1:9', NODEPLANE_API_KEY: '' }
    const [capacity, keyFile, publicKey] = await Promise.all([
      run(addArgs('bad').map((a) => (a === 'cpu=8,memory=32GiB,disk=500GiB' ? 'cpu=8,memory=lots' : a)), noApi),
      run(addArgs('bad').map((a) => (a === host.keyFile ? path.join(dir, 'missing.key') : a)), noApi),
      run(addArgs('bad').map((a) => (a === host.keyFile ? `${host.keyFile}.pub` : a)), noApi),
    ])
    expect(capacity.exitCode).toBe(2)
    expect(capacity.stderr).toMatch(/^Error: invalid --capacity\n.*missing disk/)
    expect(keyFile.exitCode).toBe(2)
    expect(keyFile.stderr).toMatch(/^Error: cannot read --ssh-key-file .*missing\.key/)
    expect(publicKey.exitCode).toBe(2)
    expect(publicKey.stderr).toMatch(/^Error: not a usable SSH private key/)

    const list = await run(['list', '--json'])
    expect(json<{ hosts: Host[] }>(list).hosts).toEqual([])
    // Only the host removed in the first test.
    expect(Number(((await t.db('hosts').count({ n: '*' }).first()) as { n: number | string }).n)).toBe(1)
  })
})
