/**
 * The production shape in a test: every daemon a separate `nodeplane daemon …` child process of
 * the real binary (bin/run.js over dist/), on one real Postgres (the run's server from
 * global-setup: a fresh control-plane and payments database) and one real nats-server
 * (`startNats`). Two api-servers, two orchestrators, two health-evaluators, two agent-gateways, one auth-server and one payment-service (the test
 * provider), each on its own free ports, all sharing one data dir whose master key
 * (`nodeplane secrets init`), payment mTLS set (`nodeplane certs dev`) and agent development CA
 * exist before any daemon starts, so the two gateways serve the same CA instead of racing to
 * make one. The orchestrators share one local-provider hosts dir (either may migrate or
 * terminate a host the other created); orchestrator N tells its new agents to dial gateway N
 * (with `agentGateways: 'all'`, every gateway, so an agent moves on when its gateway dies).
 * With `rpcGateway` an rpc-gateway daemon serves the nodes' endpoints (`stack.rpcUrl`).
 * With `ownPostgres` the two databases live on a Postgres server of the stack's own
 * (`stack.postgres`, to restart or pause under the stack), stopped by `stop()`, and are migrated
 * by `nodeplane db migrate --database all`; on the run's server they are clones of its migrated
 * templates.
 *
 * Every process writes its stdout and stderr to its own file in a temp dir; `printLogs()` shows
 * the tail of each (call it from `onTestFailed`). `kill(name, signal)` / `restart(name)` act on
 * one instance (`api-server-1`, `orchestrator-2`, `auth-server`, …). `stop()` stops every
 * daemon (SIGTERM, then SIGKILL), destroys the local hosts (the detached node agents and their
 * chain processes), drops the databases, stops NATS and removes the temp dirs; a process exit
 * hook kills whatever is left if the test process dies first.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { execa, type Result, type ResultPromise } from 'execa'
import { devCaDir } from '../../daemons/agent-gateway.js'
import { ensureDevCertificates } from '../../src/agent-gateway/tls.js'
import { createDatabase, type Db } from '../../src/db/knex.js'
import { createLogger } from '../../src/log.js'
import { LocalInfrastructureProvider } from '../../src/provisioning/infrastructure/local.js'
import { BIN, cleanEnv, nodeplane, type CliResult } from './cli.js'
import { createTestDatabase, type TestDatabase } from './db.js'
import { startNats, type NatsServer } from './nats.js'
import { adminQuery, databaseUrl, startPostgres, type PostgresServer } from './postgres.js'
import { freePort, waitFor } from './ports.js'

export type DaemonKind = 'api-server' | 'auth-server' | 'orchestrator' | 'health-evaluator' | 'agent-gateway' | 'payment-service' | 'rpc-gateway'

export interface SplitStackOptions {
  /** Extra environment for every daemon (after the defaults below). */
  env?: Record<string, string>
  /** Extra environment per kind of daemon (after `env`). */
  envFor?: Partial<Record<DaemonKind, Record<string, string>>>
  /** How many of each replicated daemon (default 2 each). */
  replicas?: Partial<Record<'api-server' | 'orchestrator' | 'health-evaluator' | 'agent-gateway', number>>
  /** Lines of each log `printLogs()` shows (default 120). */
  logTailLines?: number
  /**
   * Run the stack's databases on a Postgres server of its own (`startPostgres`), stopped by
   * `stop()`, instead of the run's shared server: for tests that restart or pause the database
   * (`stack.postgres`), which must never touch the server other test files use.
   */
  ownPostgres?: boolean
  /**
   * Which gateways the orchestrators tell new agents to dial: `'own'` (default) orchestrator N
   * gateway N; `'all'` every gateway, comma-separated in instance order, so an agent that loses
   * its gateway moves to another.
   */
  agentGateways?: 'own' | 'all'
  /**
   * Ordinary users (each with a `*` API key) made while the daemons start, as `createUser` would
   * make them (default 0): `stack.users`.
   */
  users?: number
  /**
   * Run an rpc-gateway daemon too (default false): `stack.rpcUrl`, the api-servers'
   * `RPC_PUBLIC_URL`, so nodes' `endpoints` name it.
   */
  rpcGateway?: boolean
}

export interface SplitStackUser {
  userId: string
  email: string
  key: string
}

export interface DaemonInstance {
  name: string
  kind: DaemonKind
  env: Record<string, string>
  logFile: string
  /** The running process, if any. */
  pid: number | undefined
}

export interface SplitStack {
  /** The shared data dir (master key, payments-ca/, agent-ca/, hosts/). */
  dataDir: string
  /** The local provider's hosts (one directory per host, `local-<node id>[...]`). */
  hostsDir: string
  logDir: string
  nats: NatsServer
  /** The stack's own Postgres server, with `ownPostgres` (restart()/pause()/resume()). */
  postgres: PostgresServer | undefined
  databaseUrl: string
  paymentsDatabaseUrl: string
  /** Connections of the test itself, to inspect and (as an operator shortcut) adjust rows. */
  db: Db
  paymentsDb: Db
  /** One per api-server, in instance order. */
  apiUrls: string[]
  authUrl: string
  /** host:port of each agent-gateway, in instance order. */
  gatewayTargets: string[]
  paymentGrpcTarget: string
  paymentHttpUrl: string
  /** The rpc-gateway's base URL, with `rpcGateway`. */
  rpcUrl: string | undefined
  admin: SplitStackUser
  /** The `users` ordinary users of the options, in order. */
  users: SplitStackUser[]
  /** Every instance, by name. */
  instances: ReadonlyMap<string, DaemonInstance>
  /** Instance names of one kind, e.g. ['api-server-1', 'api-server-2']. */
  namesOf(kind: DaemonKind): string[]
  /** A new (non-admin) user with a `*` API key, made by `nodeplane user create` and `api-key issue`. */
  createUser(options?: { email?: string; admin?: boolean }): Promise<SplitStackUser>
  /** Runs a `nodeplane` command with the stack's databases and data dir. */
  cli(args: string[], env?: Record<string, string>): Promise<CliResult>
  /** Sends `signal` (default SIGKILL) to one instance and waits for it to exit. */
  kill(name: string, signal?: NodeJS.Signals): Promise<Result | undefined>
  /** Stops the instance if it runs (SIGTERM, then SIGKILL) and starts it again; resolves when it logged `ready`. */
  restart(name: string): Promise<void>
  /** Instances whose process ended although neither `kill`, `restart` nor `stop` ended it: name and exit. */
  crashed(): Array<{ name: string; exitCode: number | undefined; signal: string | undefined }>
  /** Everything one instance logged so far (all of its starts). */
  log(name: string): string
  /** Prints the tail of every daemon's log and of every node agent's log to stderr. */
  printLogs(): void
  stop(): Promise<void>
}

const READY_TIMEOUT_MS = 90_000
const STOP_GRACE_MS = 10_000

/** Stacks whose processes an abrupt exit of the test process must not leave behind. */
const live = new Set<{ kill(): void }>()
let exitHookInstalled = false
function installExitHook(): void {
  if (exitHookInstalled) return
  exitHookInstalled = true
  process.once('exit', () => {
    for (const entry of live) entry.kill()
  })
}

function signalGroup(pid: number, signal: NodeJS.Signals): void {
  for (const target of [-pid, pid]) {
    try {
      process.kill(target, signal)
      return
    } catch {
      // not a group leader, or already gone
    }
  }
}

/** Pids of node agents on the local hosts (host.json and the agent's own pid file). */
function agentPids(hostsDir: string): number[] {
  if (!fs.existsSync(hostsDir)) return []
  const pids: number[] = []
  for (const host of fs.readdirSync(hostsDir)) {
    for (const file of [path.join(hostsDir, host, 'host.json'), path.join(hostsDir, host, 'state', 'agent.pid')]) {
      try {
        const text = fs.readFileSync(file, 'utf8').trim()
        const pid = file.endsWith('.json') ? Number((JSON.parse(text) as { pid?: unknown }).pid) : Number(text)
        if (Number.isInteger(pid) && pid > 0) pids.push(pid)
      } catch {
        // no such file, or half-written
      }
    }
  }
  return pids
}

function tail(file: string, lines: number): string {
  if (!fs.existsSync(file)) return '(no log)'
  const all = fs.readFileSync(file, 'utf8').split('\n')
  return (all.length > lines ? [`… (${all.length - lines} earlier lines in ${file})`, ...all.slice(-lines)] : all).join('\n')
}

export async function startSplitStack(options: SplitStackOptions = {}): Promise<SplitStack> {
  installExitHook()
  // Not tempDir(), whose dirs go at the end of the file: stop() removes this one unless SPLIT_STACK_KEEP=1.
  const root = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-split-')))
  const dataDir = path.join(root, 'data')
  const hostsDir = path.join(dataDir, 'hosts')
  const logDir = path.join(root, 'logs')
  fs.mkdirSync(dataDir, { recursive: true })
  fs.mkdirSync(logDir, { recursive: true })
  const replicas = { 'api-server': 2, orchestrator: 2, 'health-evaluator': 2, 'agent-gateway': 2, ...options.replicas }

  const instances = new Map<string, DaemonInstance & { proc: ResultPromise | undefined; result: Result | undefined }>()
  const cleanups: Array<() => Promise<unknown>> = []
  let databases: TestDatabase[] = []
  let nats: NatsServer | undefined
  let ownPostgres: PostgresServer | undefined

  const killEverything = () => {
    for (const instance of instances.values()) if (instance.proc?.pid && !instance.result) signalGroup(instance.proc.pid, 'SIGKILL')
    for (const pid of agentPids(hostsDir)) signalGroup(pid, 'SIGKILL')
  }
  const liveEntry = { kill: killEverything }
  live.add(liveEntry)

  const logTailLines = options.logTailLines ?? 120
  const printLogs = () => {
    const parts: string[] = []
    for (const instance of instances.values()) parts.push(`===== ${instance.name} (${instance.logFile}) =====\n${tail(instance.logFile, logTailLines)}`)
    if (fs.existsSync(hostsDir)) {
      for (const host of fs.readdirSync(hostsDir)) parts.push(`===== node agent on ${host} =====\n${tail(path.join(hostsDir, host, 'agent.log'), logTailLines)}`)
    }
    process.stderr.write(`${parts.join('\n')}\n`)
  }

  const stopInstance = async (name: string, signal: NodeJS.Signals, graceMs: number): Promise<Result | undefined> => {
    const instance = instances.get(name)
    if (!instance) throw new Error(`no daemon instance ${name} (have ${[...instances.keys()].join(', ')})`)
    const proc = instance.proc
    if (!proc || instance.result) {
      instance.proc = undefined
      return instance.result
    }
    proc.kill(signal)
    const timer = setTimeout(() => proc.kill('SIGKILL'), graceMs)
    const result = await proc
    clearTimeout(timer)
    instance.proc = undefined
    instance.pid = undefined
    return result
  }

  const stop = async () => {
    const failures: unknown[] = []
    await Promise.all([...instances.keys()].map((name) => stopInstance(name, 'SIGTERM', STOP_GRACE_MS).catch((err: unknown) => failures.push(err))))
    // The node agents are detached (the local provider's hosts outlive an orchestrator): stop them here.
    if (fs.existsSync(hostsDir)) {
      const provider = new LocalInfrastructureProvider({ root: hostsDir, logger: createLogger({ level: 'silent' }), stopGraceMs: 3_000 })
      // All at once: each may wait out its agent's stop grace.
      await Promise.all(fs.readdirSync(hostsDir).map((host) => provider.destroyHost(host).catch((err: unknown) => failures.push(err))))
    }
    for (const pid of agentPids(hostsDir)) signalGroup(pid, 'SIGKILL')
    while (cleanups.length > 0) await (cleanups.pop() as () => Promise<unknown>)().catch((err: unknown) => failures.push(err))
    for (const database of databases.reverse()) await database.destroy().catch((err: unknown) => failures.push(err))
    databases = []
    await nats?.destroy().catch((err: unknown) => failures.push(err))
    nats = undefined
    await ownPostgres?.stop().catch((err: unknown) => failures.push(err))
    ownPostgres = undefined
    // SPLIT_STACK_KEEP=1 keeps the daemons' and agents' logs for a look after a failure.
    if (process.env.SPLIT_STACK_KEEP === '1') process.stderr.write(`[split-stack] kept ${root}\n`)
    else fs.rmSync(root, { recursive: true, force: true })
    live.delete(liveEntry)
    if (failures.length > 0) throw new AggregateError(failures, 'stopping the split stack failed')
  }

  try {
    // One nats-server and one Postgres server (two fresh, empty databases on the run's server,
    // or on a server of the stack's own with `ownPostgres`).
    const twoDatabases = async (): Promise<[TestDatabase, TestDatabase]> => {
      // On the run's server: clones of its migrated templates (the same migrations `db migrate`
      // applies; a stack of its own runs `nodeplane db migrate` below).
      if (!options.ownPostgres) {
        return Promise.all([createTestDatabase('postgres'), createTestDatabase('postgres', { database: 'payments' })])
      }
      ownPostgres = await startPostgres()
      return [await ownDatabase(ownPostgres.url, 'np_split_cp'), await ownDatabase(ownPostgres.url, 'np_split_payments')]
    }
    // NATS as in production: mutual TLS, one nkey user per service, streams encrypted at rest.
    const [natsServer, [cp, payments]] = await Promise.all([startNats({ secure: true }), twoDatabases()])
    nats = natsServer
    databases = [cp, payments]

    const base: Record<string, string> = {
      DATABASE_URL: cp.url,
      PAYMENTS_DATABASE_URL: payments.url,
      NATS_URL: natsServer.url,
      NODEPLANE_DATA_DIR: dataDir,
      LOG_LEVEL: 'info',
    }
    const cli = (args: string[], env: Record<string, string> = {}) => nodeplane(args, { env: { ...base, ...env }, cwd: root })
    const must = async (args: string[]): Promise<string> => {
      const result = await cli(args)
      if (result.exitCode !== 0) throw new Error(`nodeplane ${args.join(' ')} exited ${result.exitCode}: ${result.stderr}`)
      return result.stdout
    }

    const t0 = Date.now()
    const progress = (what: string) => process.stderr.write(`[split-stack] ${((Date.now() - t0) / 1000).toFixed(1)}s ${what}\n`)
    // Before any daemon: schema, master key and server key pair, payment mTLS set, agent CA.
    await Promise.all([...(options.ownPostgres ? [must(['db', 'migrate', '--database', 'all', '--json'])] : []), must(['certs', 'dev', '--json'])])
    ensureDevCertificates(devCaDir(dataDir))

    const createUser = async (opts: { email?: string; admin?: boolean } = {}): Promise<SplitStackUser> => {
      const email = opts.email ?? `user-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}@split.test`
      const user = JSON.parse(await must(['user', 'create', '--email', email, ...(opts.admin ? ['--admin'] : []), '--direct-db', '--json'])) as { id: string }
      const issued = JSON.parse(
        await must(['api-key', 'issue', '--user', email, '--name', opts.admin ? 'split-stack-admin' : 'split-stack', '--scopes', '*', ...(opts.admin ? ['--admin'] : []), '--json']),
      ) as { key: string }
      return { userId: user.id, email, key: issued.key }
    }
    // The daemons need the master key; the users only the database, so they are made while the daemons start.
    await must(['secrets', 'init', '--json'])
    const usersMade = Promise.all([createUser({ email: 'admin@split.test', admin: true }), ...Array.from({ length: options.users ?? 0 }, () => createUser())])
    // Awaited below; a failure here must not go unhandled while the daemons start.
    usersMade.catch(() => undefined)

    progress('prepared')
    // Ports: every server its own.
    const taken = new Set<number>()
    const port = async (): Promise<string> => {
      for (;;) {
        const candidate = await freePort()
        if (!taken.has(candidate)) return String(taken.add(candidate) && candidate)
      }
    }
    const authPort = await port()
    const payment = { grpc: await port(), http: await port(), metrics: await port() }
    const apiPorts: string[] = []
    for (let i = 0; i < replicas['api-server']; i++) apiPorts.push(await port())
    const gatewayPorts: string[] = []
    for (let i = 0; i < replicas['agent-gateway']; i++) gatewayPorts.push(await port())
    const rpcPort = options.rpcGateway ? await port() : undefined
    const rpcUrl = rpcPort ? `http://127.0.0.1:${rpcPort}` : undefined
    const authUrl = `http://127.0.0.1:${authPort}`
    const gatewayTargets = gatewayPorts.map((p) => `127.0.0.1:${p}`)

    const defaults: Record<DaemonKind, Record<string, string>> = {
      'payment-service': {
        PAYMENT_GRPC_PORT: payment.grpc,
        PAYMENT_HTTP_PORT: payment.http,
        PAYMENT_METRICS_PORT: payment.metrics,
        PAYMENT_TEST_PROVIDER_ENABLED: 'true',
        PAYMENT_TEST_PROVIDER_DELAY: '300ms',
      },
      'auth-server': { AUTH_SERVER_PORT: authPort, AUTH_PROVIDER: 'both', AUTH_IDP_WEBHOOK_SIGNING_SECRET: `whsec_${Buffer.from('split-stack webhook signing secret').toString('base64')}` },
      'api-server': {
        AUTH_SERVER_PORT: authPort,
        AUTH_PROVIDER: 'both',
        AUTH_LEGACY_JWKS_URL: `${authUrl}/.well-known/jwks.json`,
        PAYMENT_SERVICE_URL: `127.0.0.1:${payment.grpc}`,
        // Tests poll; the per-key limit is not what they are about.
        API_RATE_LIMIT_PER_MINUTE: '100000',
        ...(rpcUrl ? { RPC_PUBLIC_URL: rpcUrl } : {}),
      },
      orchestrator: {
        // It confirms each payment.completed with the payment service before activating.
        PAYMENT_SERVICE_URL: `127.0.0.1:${payment.grpc}`,
        LOCAL_HOSTS_DIR: hostsDir,
        AGENT_GATEWAY_CA_FILE: path.join(devCaDir(dataDir), 'ca.pem'),
        WORKFLOW_LEASE: '5s',
        WORKFLOW_POLL_INTERVAL: '200ms',
      },
      'health-evaluator': {
        HEALTH_EVALUATION_INTERVAL: '1s',
        // Not shorter: ten daemons and the agents share two cores, and a heartbeat can be seconds late.
        HEARTBEAT_TIMEOUT: '5s',
        // Room for a fence (AGENT_FENCE_TIMEOUT below) longer than scenario 1g's gateway outage.
        MIGRATION_GRACE: '13s',
        SUBSCRIPTION_CLEANUP_INTERVAL: '1s',
        UPTIME_ROLLUP_INTERVAL: '5s',
      },
      'agent-gateway': { AGENT_HEARTBEAT_INTERVAL: '1s', AGENT_PROGRESS_CHECK_INTERVAL: '1s' },
      // Routes follow moves through the NATS health events; the TTL is the default (5 s).
      'rpc-gateway': { ...(rpcPort ? { RPC_GATEWAY_PORT: rpcPort } : {}), LOCAL_HOSTS_DIR: hostsDir },
    }
    // The default outbox poll (500 ms): every daemon relays its own rows the moment they commit;
    // the poll only finds rows a killed daemon left, and ten daemons polling every 100 ms kept
    // Postgres and the cores busy for nothing.
    // Fencing (orchestrators and health-evaluators check it): a cut-off agent stops its chain
    // before its node can be migrated, HEARTBEAT_TIMEOUT + MIGRATION_GRACE (18 s) after its last
    // heartbeat. The stop begins a quarter of the timeout early (12.75 s): longer than
    // split-stack-faults 1g's outage of every gateway (8 s, plus their restart and the agents'
    // reconnection), which must not fence: its agents come back to a running chain. A slow
    // acknowledgement on a loaded machine fences nothing either.
    const common: Record<string, string> = { ...base, SHUTDOWN_TIMEOUT: '5s', AGENT_FENCE_TIMEOUT: '17s', ...options.env }
    const add = (kind: DaemonKind, index: number | undefined, own: Record<string, string>) => {
      const name = index === undefined ? kind : `${kind}-${index + 1}`
      instances.set(name, {
        name,
        kind,
        env: { ...common, ...natsServer.envFor(kind === 'payment-service' ? 'payment-service' : 'control-plane'), ...defaults[kind], ...own, ...options.envFor?.[kind] },
        logFile: path.join(logDir, `${name}.log`),
        pid: undefined,
        proc: undefined,
        result: undefined,
      })
    }
    // Start order: what others depend on first (payment service for the api-servers' client, gateways for agents).
    add('payment-service', undefined, {})
    add('auth-server', undefined, {})
    for (let i = 0; i < replicas['agent-gateway']; i++) add('agent-gateway', i, { AGENT_GATEWAY_PORT: gatewayPorts[i] as string })
    for (let i = 0; i < replicas.orchestrator; i++) {
      add('orchestrator', i, { AGENT_GATEWAY_URL: options.agentGateways === 'all' ? gatewayTargets.join(',') : (gatewayTargets[i % gatewayTargets.length] as string) })
    }
    for (let i = 0; i < replicas['health-evaluator']; i++) add('health-evaluator', i, {})
    for (let i = 0; i < replicas['api-server']; i++) add('api-server', i, { API_SERVER_PORT: apiPorts[i] as string })
    if (options.rpcGateway) add('rpc-gateway', undefined, {})

    const start = async (name: string): Promise<void> => {
      const instance = instances.get(name)
      if (!instance) throw new Error(`no daemon instance ${name}`)
      if (instance.proc && !instance.result) throw new Error(`${name} is already running (pid ${instance.pid})`)
      const offset = fs.existsSync(instance.logFile) ? fs.statSync(instance.logFile).size : 0
      fs.appendFileSync(instance.logFile, `----- ${name} starting at ${new Date().toISOString()} -----\n`)
      const target = { file: instance.logFile, append: true } as const
      const proc = execa('node', [BIN, 'daemon', instance.kind], {
        env: cleanEnv(instance.env),
        extendEnv: false,
        cwd: root,
        reject: false,
        stdin: 'ignore',
        stdout: target,
        stderr: target,
      })
      instance.proc = proc
      instance.pid = proc.pid
      instance.result = undefined
      void proc.then((result) => {
        if (instance.proc === proc) instance.result = result
      })
      await waitFor(
        async () => {
          if (instance.result) throw new Error(`${name} exited (${instance.result.exitCode ?? instance.result.signal}) before it was ready`)
          const text = fs.readFileSync(instance.logFile, 'utf8').slice(offset)
          return text.split('\n').some((line) => line.startsWith('{') && line.includes('"msg":"ready"'))
        },
        `${name} to log "ready"`,
        READY_TIMEOUT_MS,
        100,
      ).catch((err: unknown) => {
        throw new Error(`${String(err)}\n${tail(instance.logFile, 40)}`)
      })
    }

    // Two waves, so the machine is not asked to load ten processes at once (all at once on a
    // loaded machine, their NATS connections timed out).
    const names = [...instances.keys()]
    const firstWave = names.filter((n) => ['payment-service', 'auth-server', 'agent-gateway'].includes(instances.get(n)?.kind as string))
    await Promise.all(firstWave.map(start))
    progress('first wave ready')
    await Promise.all(names.filter((n) => !firstWave.includes(n)).map(start))
    progress('all ready')
    const [admin, ...users] = await usersMade
    progress('users made')
    const connections = { db: cp.connect(), paymentsDb: payments.connect() }
    const stack: SplitStack = {
      dataDir,
      hostsDir,
      logDir,
      nats: natsServer,
      postgres: ownPostgres,
      databaseUrl: cp.url,
      paymentsDatabaseUrl: payments.url,
      db: connections.db,
      paymentsDb: connections.paymentsDb,
      apiUrls: apiPorts.map((p) => `http://127.0.0.1:${p}`),
      authUrl,
      gatewayTargets,
      paymentGrpcTarget: `127.0.0.1:${payment.grpc}`,
      paymentHttpUrl: `http://127.0.0.1:${payment.http}`,
      rpcUrl,
      admin: admin as SplitStackUser,
      users,
      instances,
      namesOf: (kind) => [...instances.values()].filter((i) => i.kind === kind).map((i) => i.name),
      createUser,
      cli,
      kill: (name, signal = 'SIGKILL') => stopInstance(name, signal, STOP_GRACE_MS),
      async restart(name) {
        await stopInstance(name, 'SIGTERM', STOP_GRACE_MS)
        await start(name)
      },
      crashed: () =>
        [...instances.values()]
          .filter((i) => i.proc !== undefined && i.result !== undefined)
          .map((i) => ({ name: i.name, exitCode: i.result?.exitCode, signal: i.result?.signal })),
      log: (name) => {
        const instance = instances.get(name)
        return instance && fs.existsSync(instance.logFile) ? fs.readFileSync(instance.logFile, 'utf8') : ''
      },
      printLogs,
      stop,
    }
    return stack
  } catch (err) {
    printLogs()
    await stop().catch(() => undefined)
    throw err
  }
}

/** A fresh, empty database on the stack's own server; `destroy()` closes its pools (the server goes with the stack). */
async function ownDatabase(serverUrl: string, name: string): Promise<TestDatabase> {
  await adminQuery(serverUrl, `CREATE DATABASE ${name}`)
  const url = databaseUrl(serverUrl, name)
  const pools: Db[] = []
  const open = () => {
    const db = createDatabase(url)
    pools.push(db)
    return db
  }
  return {
    dialect: 'postgres',
    url,
    db: open(),
    connect: open,
    async destroy() {
      await Promise.all(pools.map((p) => p.destroy()))
    },
  }
}
