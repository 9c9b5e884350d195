import fs from 'node:fs'
import * as Flags from '@oclif/core/flags'
import { startAgentGateway } from '../daemons/agent-gateway.js'
import { startApiServer } from '../daemons/api-server.js'
import { startAuthServer } from '../daemons/auth-server.js'
import { startHealthEvaluator } from '../daemons/health-evaluator.js'
import { lifecycleDeps, orchestratorWorkflows, startOrchestrator, startPaymentActivation } from '../daemons/orchestrator.js'
import { startPaymentService } from '../daemons/payment-service.js'
import { startRpcGateway } from '../daemons/rpc-gateway.js'
import { openDatabase, startHousekeeping, startRelay } from '../daemons/runtime.js'
import { BaseCommand } from '../src/cli/base-command.js'
import { renderHostsLeft, renderUpStatus } from '../src/cli/up-status.js'
import { localHostsRoot, runningLocalHosts } from '../src/daemon/local-hosts.js'
import { routeGrpcLogs } from '../src/daemon/grpc-logs.js'
import { openLogFile, UP_LOG_FORMATS, upLogTarget } from '../src/daemon/up-logs.js'
import { notifySystemd } from '../src/daemon/sd-notify.js'
import { ensureLocalOperator, LOCAL_OPERATOR_EMAIL } from '../src/cli/operator.js'
import { openChainCatalogueFromSettings } from '../src/config/chain-source.js'
import { loadConfig, upEnv, type Env } from '../src/config/env.js'
import { Resources } from '../src/daemon/resources.js'
import { installShutdown } from '../src/daemon/shutdown.js'
import {
  isProcessAlive,
  readStackFile,
  removeStackFile,
  stackFilePath,
  writeAdminApiKeyFile,
  writeStackFile,
  type StackFile,
} from '../src/daemon/stack-file.js'
import { DATABASE_NAMES } from '../src/db/migrate.js'
import { migrateDatabases } from '../src/db/operations.js'
import { redactDatabaseUrl } from '../src/db/url.js'
import { ConflictError } from '../src/errors.js'
import { openStackBuses } from '../src/events/open-bus.js'
import { createLogger } from '../src/log.js'
import { scheduleBackupPurge } from '../src/provisioning/backup-store.js'
import { ensureSecrets } from '../src/secrets/setup.js'
import { paymentClientFromSettings } from '../src/payments/client.js'
import { unconfiguredPaymentLookup } from '../src/subscriptions/payment-confirmation.js'
import { ensurePaymentDevCertificates, paymentsCaDir } from '../src/payments/tls.js'
import { assertFencing } from '../src/config/fencing.js'

/** The ports `--port-base` sets, in order. */
const PORT_VARIABLES = ['API_SERVER_PORT', 'AUTH_SERVER_PORT', 'AGENT_GATEWAY_PORT', 'PAYMENT_GRPC_PORT', 'PAYMENT_HTTP_PORT', 'PAYMENT_METRICS_PORT', 'RPC_GATEWAY_PORT'] as const

export default class Up extends BaseCommand<typeof Up> {
  static override summary = 'Run the whole stack in one process (SQLite by default): migrate, start every daemon, write stack.json'
  static override description = [
    'Every daemon that exists is started in this one process, sharing an in-process event bus (or NATS when NATS_URL is set). When all are ready, <data dir>/stack.json lists what runs where; it is removed on stop. Stop with Ctrl-C or SIGTERM (exit status 130 / 143).',
    `On every start the local operator ${LOCAL_OPERATOR_EMAIL} (an admin) gets a fresh admin API key in <data dir>/admin-api-key (mode 0600; the previous one is revoked). Commands run with the same data dir use it when no other credential is set.`,
  ].join('\n')
  static override examples = [
    '<%= config.bin %> up',
    '<%= config.bin %> up --data-dir /tmp/np --port-base 18080   # a second stack beside the first: ports 18080-18086',
    '<%= config.bin %> down   # in another terminal, same directory: stops it and its local hosts',
    '<%= config.bin %> whoami   # in another terminal, same directory: uses .nodeplane/admin-api-key',
  ]

  static override flags = {
    'port-base': Flags.integer({
      description: `the first of ${PORT_VARIABLES.length} consecutive ports: ${PORT_VARIABLES.join(', ')} in that order (instead of the defaults 8080, 8081, 9090, 50051, 8085, 9086, 8545 or those variables)`,
      min: 1024,
      max: 65_535 - PORT_VARIABLES.length + 1,
    }),
    'log-format': Flags.option({
      options: UP_LOG_FORMATS,
      default: 'auto' as const,
      description: 'auto: the JSON logs go to <data dir>/logs/up.log on a terminal, to stdout otherwise; json: stdout; file: the log file',
    })(),
  }

  async run(): Promise<StackFile> {
    const config = loadConfig(upEnv, this.upEnvironment())
    assertFencing(config)
    const dataDir = config.NODEPLANE_DATA_DIR
    fs.mkdirSync(dataDir, { recursive: true })
    const running = readStackFile(dataDir)
    if (running && running.pid !== process.pid && isProcessAlive(running.pid)) {
      throw new ConflictError(
        `nodeplane up is already running for ${dataDir} (pid ${running.pid})`,
        `stop it first, or use another data directory (--data-dir); its API is at ${running.api_url}`,
      )
    }

    const logFile = upLogTarget(this.flags['log-format'], dataDir, process.stdout.isTTY === true)
    const logStream = logFile ? openLogFile(logFile) : undefined
    const logFor = (daemon: string) => createLogger({ level: config.LOG_LEVEL, daemon, ...(logStream ? { destination: logStream } : {}) })
    const logger = logFor('up')
    routeGrpcLogs(logFor('grpc'))
    await migrateDatabases(config, DATABASE_NAMES)
    const resources = new Resources(logger)
    const stack = await resources.starting(async () => {
      const db = resources.add('database', await openDatabase(config.DATABASE_URL, 'nodeplane-up', logger), (d) => d.destroy())
      // With NATS_DIR the payment service connects as its own NATS user (docs/events.md, "Security").
      const buses = resources.add('bus', await openStackBuses({ settings: config, logger: logFor('event-bus'), name: 'up' }), (b) => b.close())
      const bus = buses.controlPlane
      resources.add('outbox relay', startRelay(db, bus, config, logFor('outbox-relay')), (r) => r.stop())
      resources.add('housekeeping', startHousekeeping(db, config, logFor('housekeeping')), (j) => j.stop())
      // The key hierarchy: the master key file and the server key pair, created on the first start.
      const secrets = await ensureSecrets(db, config, logFor('secrets'))
      // A fresh admin key on every start; the plaintext goes to the 0600 file only, never to a log.
      const operator = await ensureLocalOperator(db)
      const adminKeyFile = writeAdminApiKeyFile(dataDir, operator.issued.key)
      logger.info({ user_id: operator.user.id, api_key_id: operator.issued.apiKey.id, admin_api_key_file: adminKeyFile }, 'local operator ready')

      const agents = resources.add('agent-gateway', await startAgentGateway(config, { db, logger: logFor('agent-gateway'), localStack: true }), (g) => g.stop())
      // One catalogue for the orchestrator and the api-server, so both see the same version.
      const chains = resources.add('chain catalogue', await openChainCatalogueFromSettings(config, logFor('chains')), (c) => c.close())
      // New nodes' agents dial the gateway started here and trust its CA.
      const lifecycle = resources.add(
        'host fleet connections',
        await lifecycleDeps(
          { ...config, AGENT_GATEWAY_URL: config.AGENT_GATEWAY_URL ?? agents.target, AGENT_GATEWAY_CA_FILE: config.AGENT_GATEWAY_CA_FILE ?? agents.caFile },
          { db, logger: logFor('orchestrator'), masterKey: secrets.masterKey, chains },
        ),
        (l) => l.close(),
      )
      resources.add('orchestrator', startOrchestrator(config, { db, logger: logFor('orchestrator'), registry: orchestratorWorkflows(lifecycle) }), (w) => w.stop())
      resources.add('backup purge', scheduleBackupPurge({ db, logger: logFor('orchestrator'), storeUrl: lifecycle.backupStoreUrl }), (j) => j.stop())
      resources.add('health-evaluator', await startHealthEvaluator(config, { db, bus, logger: logFor('health-evaluator'), chains }), (h) => h.stop())
      // The payment service with its own database, and mutual TLS even here (`nodeplane certs dev` set).
      const paymentsDb = resources.add('payments database', await openDatabase(config.PAYMENTS_DATABASE_URL, 'nodeplane-up-payments', logger), (d) => d.destroy())
      resources.add('payments outbox relay', startRelay(paymentsDb, buses.payments, config, logFor('payments-outbox-relay')), (r) => r.stop())
      resources.add('payments housekeeping', startHousekeeping(paymentsDb, config, logFor('payments-housekeeping')), (j) => j.stop())
      if (!config.PAYMENT_TLS_CA_FILE) ensurePaymentDevCertificates(paymentsCaDir(dataDir))
      const paymentService = resources.add('payment-service', await startPaymentService(config, { db: paymentsDb, bus: buses.payments, logger: logFor('payment-service'), localStack: true }), (s) => s.stop())
      const payments = paymentClientFromSettings({ ...config, PAYMENT_SERVICE_URL: config.PAYMENT_SERVICE_URL ?? paymentService.grpcTarget })
      if (payments) resources.add('payment client', payments, (c) => c.close())
      // Added after the payment service and the orchestrator: closed before them.
      resources.add('payment consumer', await startPaymentActivation(config, { bus, db, logger: logFor('orchestrator'), chains, payments: payments ?? unconfiguredPaymentLookup() }), (c) => c.close())
      const auth = resources.add('auth-server', await startAuthServer(config, { db, logger: logFor('auth-server'), localStack: true }), (s) => s.stop())
      // Customers' endpoints; it hears of node moves on the same bus as everything here.
      const rpc = resources.add('rpc-gateway', await startRpcGateway(config, { db, logger: logFor('rpc-gateway'), chains, events: { bus } }), (g) => g.stop())
      // The api-server verifies legacy wallet tokens against the auth-server started here, and shows the gateway started here as nodes' endpoints.
      const apiConfig = {
        ...config,
        AUTH_LEGACY_JWKS_URL: config.AUTH_LEGACY_JWKS_URL ?? `${auth.url}/.well-known/jwks.json`,
        RPC_PUBLIC_URL: config.RPC_PUBLIC_URL ?? rpc.url,
      }
      const api = resources.add(
        'api-server',
        await startApiServer(apiConfig, { db, bus, logger: logFor('api-server'), localStack: true, masterKey: secrets.masterKey, chains, ...(payments ? { payments } : {}) }),
        (s) => s.stop(),
      )
      const file: StackFile = {
        pid: process.pid,
        started_at: new Date().toISOString(),
        data_dir: dataDir,
        daemons: ['orchestrator', 'health-evaluator', 'agent-gateway', 'payment-service', 'auth-server', 'rpc-gateway', 'api-server'],
        api_url: api.url,
        auth_url: auth.url,
        rpc_url: rpc.url,
        agent_gateway: agents.target,
        agent_ca_file: agents.caFile ?? null,
        payment_grpc: paymentService.grpcTarget,
        payment_http_url: paymentService.httpUrl,
        payment_metrics_url: paymentService.metricsUrl,
        payment_ca_file: paymentService.caFile,
        admin_api_key_file: adminKeyFile,
        database_url: redactDatabaseUrl(config.DATABASE_URL),
        payments_database_url: redactDatabaseUrl(config.PAYMENTS_DATABASE_URL),
        bus: bus.kind,
      }
      writeStackFile(dataDir, file)
      resources.add('stack.json', dataDir, (dir) => removeStackFile(dir))
      return file
    })

    const hostsRoot = localHostsRoot(config)
    installShutdown({
      logger,
      timeoutMs: config.SHUTDOWN_TIMEOUT,
      stop: async () => {
        await resources.closeAll()
        // Local hosts outlive the stack on purpose; say so, and how to stop them.
        const hosts = runningLocalHosts(hostsRoot, logger)
        logger.info({ local_hosts: hosts }, 'local hosts left running')
        if (!this.jsonEnabled()) process.stderr.write(`${renderHostsLeft(hosts, this.flags['data-dir'] ? ` --data-dir ${this.flags['data-dir']}` : '')}\n`)
      },
    })
    logger.info({ api_url: stack.api_url, auth_url: stack.auth_url, stack_file: stackFilePath(dataDir) }, 'ready')
    await notifySystemd('READY=1', logger)
    if (!this.jsonEnabled()) process.stderr.write(`${renderUpStatus(stack, { logFile, operator: LOCAL_OPERATOR_EMAIL })}\n`)
    return stack
  }

  /** The environment with `--port-base` applied: it sets every port, over the variables. */
  private upEnvironment(): Env {
    const env = this.env()
    const base = this.flags['port-base']
    if (base === undefined) return env
    return { ...env, ...Object.fromEntries(PORT_VARIABLES.map((variable, i) => [variable, String(base + i)])) }
  }
}
