import fs from 'node:fs'
import path from 'node:path'
import { execa, type ResultPromise } from 'execa'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { StackFile } from '../../src/daemon/stack-file.js'
import { createDatabase } from '../../src/db/knex.js'
import { insertNode } from '../../src/nodes/node-store.js'
import { BIN, cleanEnv, nodeplane, tempDir, waitForFile, type CliResult } from '../helpers/cli.js'
import { createTestDatabase, DIALECTS, type TestDatabase } from '../helpers/db.js'
import { insertSubscription } from '../helpers/fixtures.js'
import { freePortRange, waitFor } from '../helpers/ports.js'

/**
 * `nodeplane up` as a person starts it: on a terminal (a real pty through `script`), with one
 * `--port-base`, then a real node on a local host; `nodeplane down` from the same directory stops
 * the stack and that host (agent and chain), and `up` says on its way out what kept running. The
 * stored-login contexts (`login --context`, `context use`, `--context`, NODEPLANE_CONTEXT) run
 * against the same stack's API.
 */
interface HostRecord {
  host_id: string
  pid: number
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return !/\) Z /.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8'))
  } catch {
    return false
  }
}

function localHosts(dataDir: string): HostRecord[] {
  const root = path.join(dataDir, 'hosts')
  if (!fs.existsSync(root)) return []
  return fs
    .readdirSync(root)
    .filter((name) => fs.existsSync(path.join(root, name, 'host.json')))
    .map((name) => JSON.parse(fs.readFileSync(path.join(root, name, 'host.json'), 'utf8')) as HostRecord)
}

describe.each(DIALECTS)('nodeplane up on a terminal, contexts, and nodeplane down (%s)', (dialect) => {
  let dir: string
  let dataDir: string
  let base: number
  let env: Record<string, string>
  let databases: TestDatabase[] = []
  let terminal: ResultPromise
  let screen = ''
  let stack: StackFile

  const run = (args: string[], options: { cwd?: string; env?: Record<string, string>; input?: string } = {}): Promise<CliResult> =>
    options.input === undefined
      ? nodeplane(args, { cwd: options.cwd ?? dir, env: { ...env, ...options.env } })
      : execa('node', [BIN, ...args], { cwd: options.cwd ?? dir, env: cleanEnv({ ...env, ...options.env }), extendEnv: false, input: options.input, reject: false }).then((r) => ({
          exitCode: r.exitCode ?? -1,
          stdout: String(r.stdout),
          stderr: String(r.stderr),
        }))
  const json = <T = Record<string, unknown>>(result: CliResult): T => JSON.parse(result.stdout) as T

  beforeAll(async () => {
    dir = fs.realpathSync(tempDir())
    dataDir = path.join(dir, '.nodeplane')
    env = { HOME: path.join(dir, 'home'), XDG_CONFIG_HOME: path.join(dir, 'config'), AGENT_HEARTBEAT_INTERVAL: '1s', HEALTH_EVALUATION_INTERVAL: '1s' }
    fs.mkdirSync(env.HOME as string)
    if (dialect === 'postgres') {
      databases = [await createTestDatabase('postgres'), await createTestDatabase('postgres', { database: 'payments' })]
      env.DATABASE_URL = databases[0]!.url
      env.PAYMENTS_DATABASE_URL = databases[1]!.url
    }
    base = await freePortRange(7)
    // A real terminal: util-linux `script` runs `up` on a pty and copies what it shows.
    terminal = execa('script', ['-qfec', `node ${BIN} up --port-base ${base}`, '/dev/null'], { cwd: dir, env: cleanEnv(env), extendEnv: false, reject: false })
    terminal.stdout?.on('data', (chunk: Buffer) => (screen += chunk.toString().replaceAll('\r', '')))
    const exited = terminal.then((r) => {
      throw new Error(`nodeplane up exited (${r.exitCode}) before it was ready: ${screen.slice(-2000)}`)
    })
    stack = await Promise.race([waitForFile<StackFile>(path.join(dataDir, 'stack.json'), 'stack.json', 90_000), exited])
    exited.catch(() => undefined)
  }, 120_000)

  afterAll(async () => {
    // Whatever a failed test left: the stack, then the local hosts' agents and chains (process groups).
    const left = fs.existsSync(path.join(dataDir, 'stack.json')) ? (JSON.parse(fs.readFileSync(path.join(dataDir, 'stack.json'), 'utf8')) as StackFile) : undefined
    if (left && alive(left.pid)) process.kill(left.pid, 'SIGTERM')
    if (terminal && terminal.exitCode === null) {
      await Promise.race([terminal, new Promise((resolve) => setTimeout(resolve, 20_000))])
      terminal.kill('SIGKILL')
    }
    for (const host of localHosts(dataDir)) {
      try {
        process.kill(-host.pid, 'SIGKILL')
      } catch {
        // gone already
      }
    }
    for (const database of databases) await database.destroy()
  })

  it('on a terminal prints what runs where on the one --port-base, keeps the JSON logs in .nodeplane/logs, with no warnings', async () => {
    await waitFor(async () => screen.includes('Stop: Ctrl-C'), 'the status on the terminal')
    const urls = [stack.api_url, stack.auth_url, stack.rpc_url]
    expect(urls).toEqual([`http://127.0.0.1:${base}`, `http://127.0.0.1:${base + 1}`, `http://127.0.0.1:${base + 6}`])
    expect(stack.agent_gateway).toBe(`127.0.0.1:${base + 2}`)
    expect([stack.payment_grpc, stack.payment_http_url, stack.payment_metrics_url]).toEqual([`127.0.0.1:${base + 3}`, `http://127.0.0.1:${base + 4}`, `http://127.0.0.1:${base + 5}/metrics`])
    expect((await fetch(`${stack.payment_http_url}/health`)).ok).toBe(true)
    expect((await fetch(`${stack.api_url}/health`)).ok).toBe(true)

    const logFile = path.join(dataDir, 'logs', 'up.log')
    const lines = screen.trim().split('\n')
    expect(lines[0]).toMatch(new RegExp(`^nodeplane is up \\(pid ${stack.pid}\\)$`))
    for (const [name, value] of [['API', stack.api_url], ['auth', stack.auth_url], ['rpc-gateway', stack.rpc_url], ['agent gateway', stack.agent_gateway], ['logs', logFile], ['admin key', stack.admin_api_key_file]]) {
      expect(lines.some((l) => new RegExp(`^  ${name}\\s+${value}`).test(l)), `${name} ${value}`).toBe(true)
    }
    expect(screen).toContain('nodeplane whoami')
    // Nothing but the status: no JSON log line, no gRPC diagnostics, no production warning.
    expect(lines.filter((l) => l.startsWith('{') || /^[DIWE] \d{4}-\d\d-\d\dT/.test(l) || /warn|production/i.test(l))).toEqual([])
    const logged = fs.readFileSync(logFile, 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { level: string; msg: string })
    expect(logged.some((l) => l.msg === 'ready')).toBe(true)
    expect(logged.filter((l) => l.level !== 'info' && l.level !== 'debug')).toEqual([])
  })

  it('keeps one login per context: login --context, --context, NODEPLANE_CONTEXT, context use|list|show|remove, and a file from before contexts', { timeout: 120_000 }, async () => {
    const adminKey = fs.readFileSync(stack.admin_api_key_file, 'utf8').trim()
    const created = await run(['api-key', 'create', '--name', 'ci', '--scopes', 'nodes:read', '--json'])
    expect(created.exitCode, created.stderr).toBe(0)
    const ci = json<{ id: string; key: string }>(created)
    const home = env.HOME as string
    const file = path.join(env.XDG_CONFIG_HOME as string, 'nodeplane', 'credentials.json')

    const prod = await run(['login', '--context', 'prod', '--api-url', stack.api_url, '--with-key-stdin', '--json'], { cwd: home, input: `${adminKey}\n` })
    expect(prod.exitCode, prod.stderr).toBe(0)
    expect(json(prod)).toMatchObject({ context: 'prod', current_context: 'prod', api_url: stack.api_url, credentials_file: file })
    const staging = await run(['login', '--context', 'staging', '--api-url', stack.api_url, '--with-key-stdin'], { cwd: home, input: `${ci.key}\n` })
    expect(staging.exitCode, staging.stderr).toBe(0)
    expect(staging.stderr).toContain('The current context stays prod')
    expect(fs.statSync(file).mode & 0o777).toBe(0o600)

    // Away from the stack's directory only the stored logins say where and who.
    const whoami = async (args: string[], extra: Record<string, string> = {}) => run(['whoami', ...args, '--json'], { cwd: home, env: extra })
    expect(json(await whoami([]))).toMatchObject({ context: 'prod', credentials_from: 'login', scopes: expect.arrayContaining(['admin']) })
    expect(json(await whoami(['--context', 'staging']))).toMatchObject({ context: 'staging', api_key_id: ci.id })
    expect(json(await whoami([], { NODEPLANE_CONTEXT: 'staging' }))).toMatchObject({ context: 'staging', api_key_id: ci.id })

    const used = await run(['context', 'use', 'staging', '--json'], { cwd: home })
    expect(json(used)).toEqual({ current_context: 'staging', api_url: stack.api_url, credentials_file: file })
    const listed = await run(['context', 'ls', '--json'], { cwd: home })
    expect(json(listed)).toEqual({
      credentials_file: file,
      current_context: 'staging',
      contexts: [
        { name: 'prod', api_url: stack.api_url, current: false },
        { name: 'staging', api_url: stack.api_url, current: true },
      ],
    })
    const shown = await run(['context', 'show', '--context', 'prod', '--json'], { cwd: home })
    expect(json(shown)).toEqual({ name: 'prod', api_url: stack.api_url, selected_by: 'flag', credentials_file: file })
    for (const output of [listed.stdout, shown.stdout, used.stdout, prod.stdout, staging.stdout, staging.stderr]) {
      expect(output).not.toContain(adminKey)
      expect(output).not.toContain(ci.key)
    }

    // A context that is not there is refused (exit 3, one line naming it), never another API; a bad name is a usage error.
    const before = fs.readFileSync(file, 'utf8')
    const typo = await run(['whoami', '--context', 'prdo'], { cwd: home })
    expect(typo.exitCode).toBe(3)
    expect(typo.stderr.split('\n')[0]).toBe(`Error: no context "prdo" in ${file}`)
    expect((await run(['context', 'use', 'prdo'], { cwd: home })).exitCode).toBe(3)
    expect((await run(['whoami'], { cwd: home, env: { NODEPLANE_CONTEXT: '../etc' } })).exitCode).toBe(2)
    expect(fs.readFileSync(file, 'utf8')).toBe(before)

    // Removing the current context leaves none: away from the stack, no API to talk to.
    expect(json(await run(['context', 'remove', 'staging', '--json'], { cwd: home }))).toMatchObject({ context: 'staging', removed: true })
    expect((await run(['whoami'], { cwd: home })).exitCode).toBe(78)
    expect((await run(['context', 'remove', 'staging'], { cwd: home })).exitCode).toBe(3)

    // A single-login file from before contexts is the context "default".
    const old = path.join(dir, 'old-config')
    fs.mkdirSync(path.join(old, 'nodeplane'), { recursive: true, mode: 0o700 })
    fs.writeFileSync(path.join(old, 'nodeplane', 'credentials.json'), JSON.stringify({ api_url: stack.api_url, api_key: ci.key }), { mode: 0o600 })
    expect(json(await whoami([], { XDG_CONFIG_HOME: old }))).toMatchObject({ context: 'default', credentials_from: 'login', api_key_id: ci.id })
  })

  it('down stops the stack and the local host it started; up said on its way out which host kept running', { timeout: 240_000 }, async () => {
    const db = createDatabase(env.DATABASE_URL ?? stack.database_url)
    let host: HostRecord
    try {
      const operator = (await db('users').where({ email: 'operator@localhost' }).first()) as { id: string }
      const subscription = await insertSubscription(db, operator.id)
      const node = await insertNode(db, { subscription_id: subscription, chain_profile_id: 'devnet', node_type: 'full', provider: 'local', region: 'local', instance_type: 'local.small' })
      const provision = await run(['node', 'provision', node.id, '--json'])
      expect(provision.exitCode, provision.stderr).toBe(0)
      host = await waitFor(async () => localHosts(dataDir).find((h) => alive(h.pid)), 'the local host to run its agent', 120_000)
    } finally {
      await db.destroy()
    }

    const down = await run(['down', '--json'])
    expect(down.exitCode, down.stderr).toBe(0)
    expect(json(down)).toMatchObject({ data_dir: dataDir, stack: { pid: stack.pid, api_url: stack.api_url }, stale_stack_file: false, hosts_stopped: [{ host_id: host.host_id, pid: host.pid }], hosts_kept: [] })
    expect(alive(host.pid)).toBe(false)
    const result = await terminal
    expect(result.exitCode).toBe(143)
    expect(screen).toContain(`1 local host keeps running (agent and chain):\n  ${host.host_id}`)
    expect(screen).toContain('`nodeplane down` stops them.')
    expect(fs.existsSync(path.join(dataDir, 'stack.json'))).toBe(false)
    // The host's directory (the chain's data) stays.
    expect(fs.existsSync(path.join(dataDir, 'hosts', host.host_id))).toBe(true)

    // Again: nothing runs, which is no error; in a directory without a stack nothing is created.
    const again = await run(['down'])
    expect(again.exitCode).toBe(0)
    expect(again.stdout).toContain(`No nodeplane up was running for ${dataDir}`)
    const empty = fs.realpathSync(tempDir())
    const elsewhere = await run(['down', '--json'], { cwd: empty })
    expect(json(elsewhere)).toEqual({ data_dir: path.join(empty, '.nodeplane'), stack: null, stale_stack_file: false, hosts_stopped: [], hosts_kept: [] })
    expect(fs.readdirSync(empty)).toEqual([])
    const bad = await run(['down', '--timeout', 'soon'])
    expect(bad.exitCode).toBe(2)
    expect(bad.stderr.split('\n')[0]).toBe('Error: --timeout: "soon" is not a duration such as 30s or 2m')
  })
})
