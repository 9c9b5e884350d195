/**
 * `/api/v1/hosts` against a real sshd in a network namespace (test/helpers/netns.ts), on both
 * databases: adding pins the host key and checks prerequisites, every failed check leaves no row
 * and no key file, the state rules, admin only, bad input, and the health probe following the
 * host's link down and up (unreachable after failed probes in a row, not after one). One namespace
 * for the whole file; each dialect has its own database, api-server and key directory.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { utils } from 'ssh2'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { authenticatorFromSettings } from '../../../src/auth/authenticator.js'
import type { Db } from '../../../src/db/knex.js'
import { controlPlaneRoutes } from '../../../src/http/routes/index.js'
import { probeHosts, scheduleHostProbe } from '../../../src/hosts/probe.js'
import { createSshPool, type SshPool } from '../../../src/hosts/ssh-pool.js'
import { fileSshKeyStore } from '../../../src/hosts/ssh-keys.js'
import { createLogger } from '../../../src/log.js'
import { DIALECTS } from '../../helpers/db.js'
import { insertTestNode } from '../../helpers/fixtures.js'
import { startNetnsHost, type NetnsHost } from '../../helpers/netns.js'
import { newKey, newUser } from '../auth/api-harness.js'
import { getJson, Resources, type StartedApi } from '../http/harness.js'

/**
 * An ed25519 key pair from ssh2's generator, which writes about one key in 300 with a 31-byte
 * public key that neither ssh2 nor ssh-keygen can read: drawn again until ssh2 reads it.
 */
function sshKeyPair(): { private: string; public: string } {
  for (;;) {
    const pair = utils.generateKeyPairSync('ed25519')
    if (!(utils.parseKey(pair.private) instanceof Error)) return pair
  }
}

let host: NetnsHost
/** The host key sshd presents now (rotated by the changed-key test). */
let currentFingerprint: string
beforeAll(async () => {
  host = await startNetnsHost()
  currentFingerprint = host.hostKeyFingerprint
})
afterAll(async () => host?.stop())

const CAPACITY = { cpu: 8, memory_bytes: 32 * 2 ** 30, disk_bytes: 500 * 2 ** 30 }

interface HostBody {
  id: string
  name: string
  state: string
  host_key_fingerprint: string
  last_probe_result: string | null
  last_probe_error: string | null
  capacity: typeof CAPACITY
  labels: Record<string, string>
  root_dir: string
}

describe.each(DIALECTS)('hosts API on %s', (dialect) => {
  const resources = new Resources()
  let db: Db
  let api: StartedApi
  let pool: SshPool
  let keyDir: string
  let admin: string
  let user: string
  afterAll(() => resources.cleanup())

  beforeAll(async () => {
    db = (await resources.database(dialect)).db
    keyDir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-ssh-keys-'))
    resources.add(async () => fs.rmSync(keyDir, { recursive: true, force: true }))
    pool = createSshPool({ connectTimeoutMs: 2_000, execTimeoutMs: 5_000 })
    resources.add(() => pool.close())
    const hostFleet = { pool, keys: fileSshKeyStore(keyDir), minFreeDiskBytes: 64 * 2 ** 20 }
    const { authenticate } = authenticatorFromSettings({ AUTH_PROVIDER: 'idp', AUTH_IDP_AUTHORIZED_PARTY: [], AUTH_CLOCK_SKEW: 30_000 }, { db })
    api = await resources.api({ db, authenticate, routes: controlPlaneRoutes({ db, hostFleet }) })
    const adminUser = await newUser(db, { admin: true })
    admin = (await newKey(db, adminUser.id, { scopes: ['*', 'admin'], admin: true })).key
    user = (await newKey(db, (await newUser(db)).id, { scopes: ['*'] })).key
  })

  const call = (method: string, route: string, body?: unknown, key: string | null = admin) =>
    getJson(`${api.url}/api/v1${route}`, {
      method,
      headers: { ...(key ? { 'x-api-key': key } : {}), ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    })

  const addBody = (overrides: Record<string, unknown> = {}) => ({
    name: 'fra-1',
    address: host.address,
    port: host.port,
    user: 'root',
    ssh_private_key: host.privateKey,
    region: 'eu-central',
    root_dir: host.rootDir,
    capacity: CAPACITY,
    labels: { rack: 'r12' },
    ...overrides,
  })

  const rowCount = async () => Number(((await db('hosts').count({ n: '*' }).first()) as { n: number | string }).n)
  const keyFiles = () => fs.readdirSync(keyDir).filter((f) => !f.startsWith('.'))

  /** A refused add: the status, details matching, and nothing written. */
  async function expectRefused(body: unknown, status: number, details: RegExp): Promise<void> {
    const rows = await rowCount()
    const files = keyFiles().length
    const res = await call('POST', '/hosts', body)
    expect(res.status, JSON.stringify(res.body)).toBe(status)
    expect(res.body).toMatchObject({ error: expect.any(String), details: expect.stringMatching(details) })
    expect(JSON.stringify(res.body)).not.toContain('PRIVATE KEY')
    expect(await rowCount()).toBe(rows)
    expect(keyFiles()).toHaveLength(files)
  }

  it('adds a host: connects, pins the host key it presents, checks prerequisites, keeps the key in the key directory only', async () => {
    const res = await call('POST', '/hosts', addBody())
    expect(res.status, JSON.stringify(res.body)).toBe(201)
    const added = res.body as HostBody
    expect(added).toMatchObject({ name: 'fra-1', state: 'ready', host_key_fingerprint: currentFingerprint, last_probe_result: 'ok', capacity: CAPACITY, labels: { rack: 'r12' }, root_dir: host.rootDir })
    expect(JSON.stringify(res.body)).not.toContain('PRIVATE KEY')

    const keyFile = path.join(keyDir, `${added.id}.key`)
    expect(fs.statSync(keyFile).mode & 0o777).toBe(0o600)
    expect(fs.readFileSync(keyFile, 'utf8')).toBe(host.privateKey)
    const row = JSON.stringify(await db('hosts').where({ id: added.id }).first())
    expect(row).not.toContain('PRIVATE KEY')
    expect(api.logs.text()).not.toContain('PRIVATE KEY')

    // One host adds what is placed on it: nothing yet, all of it free, no drain.
    const byName = await call('GET', '/hosts/fra-1')
    expect(byName.body).toEqual({ ...added, reservations: [], used: { cpu: 0, memory_bytes: 0, disk_bytes: 0, nodes: 0 }, free: CAPACITY, drain: null })
    const list = await call('GET', '/hosts')
    expect(list.body).toMatchObject({ items: [{ id: added.id }], next_cursor: null })

    await expectRefused(addBody(), 409, /fra-1 exists/)
  })

  it('refuses a host whose key is not the one given, a key it does not accept, an address where no sshd answers, a missing root directory', async () => {
    const other = `SHA256:${'A'.repeat(43)}`
    await expectRefused(addBody({ name: 'pinned', host_key_fingerprint: other }), 400, new RegExp(`pinned ${other}, presented ${currentFingerprint.replace(/[+/]/g, '\\$&')}`))
    const stranger = sshKeyPair().private
    await expectRefused(addBody({ name: 'stranger', ssh_private_key: stranger }), 400, /refused the SSH key/)
    await expectRefused(addBody({ name: 'closed', port: 2222 }), 400, /cannot reach .*:2222/)
    await expectRefused(addBody({ name: 'noroot', root_dir: '/nonexistent/nodeplane' }), 400, /root directory \/nonexistent\/nodeplane does not exist/)
  })

  it('refuses malformed, missing and oversized input with 400 {error, details}, and writes nothing', async () => {
    const { public: publicKey } = sshKeyPair()
    const { name: _name, ...withoutName } = addBody()
    const cases: Array<[unknown, RegExp]> = [
      [withoutName, /name/],
      [addBody({ name: 'Bad_Name' }), /name/],
      [addBody({ name: 'x'.repeat(64) }), /name/],
      [addBody({ port: 70000 }), /port/],
      [addBody({ address: 'not an address!' }), /address/],
      [addBody({ capacity: { cpu: 0, memory_bytes: 1, disk_bytes: 1 } }), /capacity/],
      [addBody({ capacity: { cpu: 8, memory_bytes: 1 } }), /capacity/],
      [addBody({ labels: { 'Bad Key': 'x' } }), /labels/],
      [addBody({ root_dir: 'relative/dir' }), /root_dir/],
      [addBody({ root_dir: "/tmp/x'; rm -rf /" }), /root_dir/],
      [addBody({ host_key_fingerprint: 'MD5:aa:bb' }), /host_key_fingerprint/],
      [addBody({ ssh_private_key: 'x'.repeat(17 * 1024) }), /ssh_private_key/],
      [addBody({ ssh_private_key: 'not a key' }), /ssh_private_key: not an SSH private key/],
      [addBody({ ssh_private_key: publicKey }), /ssh_private_key/],
      [addBody({ extra: true }), /extra|unrecognized/i],
    ]
    for (const [body, details] of cases) await expectRefused(body, 400, details)
  })

  it('is admin only: no key 401, a non-admin key 403 on every route, nothing changed', async () => {
    const routes: Array<[string, string, unknown?]> = [
      ['POST', '/hosts', addBody({ name: 'sneaky' })],
      ['GET', '/hosts'],
      ['GET', '/hosts/fra-1'],
      ['POST', '/hosts/fra-1/cordon'],
      ['POST', '/hosts/fra-1/uncordon'],
      ['POST', '/hosts/fra-1/drain'],
      ['DELETE', '/hosts/fra-1'],
    ]
    for (const [method, route, body] of routes) {
      expect((await call(method, route, body, null)).status, `${method} ${route}`).toBe(401)
      const res = await call(method, route, body, user)
      expect(res.status, `${method} ${route}`).toBe(403)
      expect(res.body).toMatchObject({ error: expect.any(String), details: expect.any(String) })
    }
    expect((await call('GET', '/hosts/fra-1')).body).toMatchObject({ state: 'ready' })
    expect(await db('hosts').where({ name: 'sneaky' }).first()).toBeUndefined()
  })

  it('cordon, uncordon, drain and remove follow the state rules; a host with a node cannot be removed', async () => {
    // Six cordons at once: the row lock lets exactly one move it; the others are repeats.
    const cordons = await Promise.all(Array.from({ length: 6 }, () => call('POST', '/hosts/fra-1/cordon')))
    expect(cordons.map((c) => c.status)).toEqual([200, 200, 200, 200, 200, 200])
    expect(cordons.map((c) => (c.body as { changed: boolean }).changed).sort()).toEqual([false, false, false, false, false, true])
    for (const c of cordons) expect(c.body).toMatchObject({ state: 'cordoned', version: expect.any(Number) })
    const cordonedVersion = ((await call('GET', '/hosts/fra-1')).body as { version: number }).version
    const again = await call('POST', '/hosts/fra-1/cordon')
    expect(again).toMatchObject({ status: 200, body: { state: 'cordoned', version: cordonedVersion, changed: false } })
    expect((await call('POST', '/hosts/fra-1/uncordon')).body).toMatchObject({ state: 'ready', changed: true })
    const uncordonAgain = await call('POST', '/hosts/fra-1/uncordon')
    expect(uncordonAgain).toMatchObject({ status: 200, body: { state: 'ready', version: cordonedVersion + 1, changed: false } })
    expect(await db('hosts').where({ name: 'fra-1' }).first('state', 'version')).toEqual({ state: 'ready', version: cordonedVersion + 1 })
    expect((await call('GET', '/hosts/nope')).status).toBe(404)
    expect((await call('POST', '/hosts/nope/cordon')).status).toBe(404)

    // A live node on the host: drain leaves it draining, remove is refused.
    const { id } = (await call('GET', '/hosts/fra-1')).body as HostBody
    const node = await insertTestNode(db)
    await db('nodes').where({ id: node.id }).update({ provider: 'ssh', host_id: `${id}/node-key` })
    expect((await call('POST', '/hosts/fra-1/drain')).body).toMatchObject({ state: 'draining' })
    // A state cordon does not start from is still a conflict, and nothing moves.
    const cordonDraining = await call('POST', '/hosts/fra-1/cordon')
    expect(cordonDraining).toMatchObject({ status: 409, body: { error: expect.any(String), details: expect.any(String) } })
    expect(await db('hosts').where({ name: 'fra-1' }).first('state')).toEqual({ state: 'draining' })
    const refused = await call('DELETE', '/hosts/fra-1')
    expect(refused.status).toBe(409)
    expect(refused.body).toMatchObject({ details: expect.stringMatching(/drain it first/) })
    expect(fs.existsSync(path.join(keyDir, `${id}.key`))).toBe(true)

    // Once the node is gone, drain completes (cordoned) and remove works.
    await db('nodes').where({ id: node.id }).update({ state: 'terminated' })
    expect((await call('POST', '/hosts/fra-1/drain')).body).toMatchObject({ state: 'cordoned' })
    const removed = await call('DELETE', '/hosts/fra-1')
    expect(removed.status).toBe(200)
    expect(removed.body).toMatchObject({ state: 'removed', removed_at: expect.any(String) })
    expect(fs.existsSync(path.join(keyDir, `${id}.key`))).toBe(false)
    expect((await call('GET', '/hosts/fra-1')).status).toBe(404)
    expect((await call('GET', `/hosts/${id}`)).body).toMatchObject({ state: 'removed' })
    expect((await call('GET', '/hosts')).body).toMatchObject({ items: [] })
    expect((await call('GET', '/hosts?state=removed')).body).toMatchObject({ items: [{ id }] })
    const cordonRemoved = await call('POST', `/hosts/${id}/cordon`)
    expect(cordonRemoved.status).toBe(409)
    expect(cordonRemoved.body).toMatchObject({ details: expect.stringMatching(/removed/) })
  })

  it('the probe marks a host unreachable after two failed probes in a row when its link goes down, ready when it returns, under the job lease', async () => {
    const res = await call('POST', '/hosts', addBody())
    expect(res.status, JSON.stringify(res.body)).toBe(201)
    const { id } = res.body as HostBody
    const deps = { db, pool, keys: fileSshKeyStore(keyDir), timeoutMs: 1_500, failuresBeforeUnreachable: 2 }
    const job = scheduleHostProbe({ db, logger: createLogger({ level: 'silent' }), cronTime: '0 0 0 1 1 *' }, deps, 1_000)
    resources.add(() => job.stop())
    expect(await job.tick()).toBe(true)
    expect((await call('GET', `/hosts/${id}`)).body).toMatchObject({ state: 'ready', last_probe_result: 'ok' })

    // One failed probe between answers is no outage: the count starts again after each answer.
    for (let i = 0; i < 2; i++) {
      await host.setLinkUp(false)
      try {
        expect(await probeHosts(deps, new Date())).toEqual([])
        expect((await call('GET', `/hosts/${id}`)).body).toMatchObject({ state: 'ready', last_probe_result: 'unreachable' })
      } finally {
        await host.setLinkUp(true)
      }
      expect(await probeHosts(deps, new Date())).toEqual([])
      expect((await call('GET', `/hosts/${id}`)).body).toMatchObject({ state: 'ready', last_probe_result: 'ok' })
    }

    await host.setLinkUp(false)
    try {
      expect(await probeHosts(deps, new Date())).toEqual([])
      expect(await probeHosts(deps, new Date())).toEqual([{ host: 'fra-1', from: 'ready', to: 'unreachable' }])
      expect((await call('GET', `/hosts/${id}`)).body).toMatchObject({ state: 'unreachable', last_probe_result: 'unreachable', last_probe_error: expect.any(String) })
    } finally {
      await host.setLinkUp(true)
    }
    expect(await probeHosts(deps, new Date())).toEqual([{ host: 'fra-1', from: 'unreachable', to: 'ready' }])
    expect((await call('GET', `/hosts/${id}`)).body).toMatchObject({ state: 'ready', last_probe_result: 'ok', last_probe_error: null })

    // A cordoned host that cannot be reached stays cordoned; only its result is recorded.
    await call('POST', `/hosts/${id}/cordon`)
    await host.setLinkUp(false)
    try {
      expect(await probeHosts(deps, new Date())).toEqual([])
      expect((await call('GET', `/hosts/${id}`)).body).toMatchObject({ state: 'cordoned', last_probe_result: 'unreachable' })
    } finally {
      await host.setLinkUp(true)
    }
    await call('POST', `/hosts/${id}/uncordon`)
    expect(await probeHosts(deps, new Date())).toEqual([])
  }, 60_000)

  it('refuses a host whose SSH host key changed: the first probe marks it unreachable naming both keys, adding it with the old pin is refused', async () => {
    const { id, host_key_fingerprint: pinned } = (await call('GET', '/hosts/fra-1')).body as HostBody
    currentFingerprint = await host.rotateHostKey()
    pool.drop(id)
    const deps = { db, pool, keys: fileSshKeyStore(keyDir), timeoutMs: 1_500, failuresBeforeUnreachable: 3 }
    expect(await probeHosts(deps, new Date())).toEqual([{ host: 'fra-1', from: 'ready', to: 'unreachable' }])
    const probed = (await call('GET', `/hosts/${id}`)).body as HostBody
    expect(probed).toMatchObject({ state: 'unreachable', last_probe_result: 'host_key_mismatch', host_key_fingerprint: pinned })
    expect(probed.last_probe_error).toContain(`pinned ${pinned}, presented ${currentFingerprint}`)

    await expectRefused(addBody({ name: 'fra-2', host_key_fingerprint: pinned }), 400, /changed: pinned/)
  })
})
