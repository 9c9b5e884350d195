import { startAgentGateway } from '../../daemons/agent-gateway.js'
import { openDatabase, startRelay } from '../../daemons/runtime.js'
import { BaseCommand } from '../../src/cli/base-command.js'
import { agentGatewayEnv } from '../../src/config/env.js'
import { loadSettingsWithSecrets } from '../../src/secrets/load-settings.js'
import { Resources } from '../../src/daemon/resources.js'
import { installShutdown } from '../../src/daemon/shutdown.js'
import { announceReady } from '../../src/daemon/sd-notify.js'
import { assertSchemaCurrent } from '../../src/db/schema-check.js'
import { openEventBus } from '../../src/events/open-bus.js'
import { createLogger } from '../../src/log.js'
import { routeGrpcLogs } from '../../src/daemon/grpc-logs.js'

export default class DaemonAgentGateway extends BaseCommand<typeof DaemonAgentGateway> {
  static override summary = 'Run the agent-gateway daemon: gRPC over TLS for node agents (port AGENT_GATEWAY_PORT, 9090)'
  static override description =
    'Agents authenticate with their node token. Serves AGENT_GATEWAY_TLS_CERT_FILE/_KEY_FILE, or, when neither is set, a development CA kept in <data dir>/agent-ca (agents must trust its ca.pem). Heartbeats are written in batches every HEARTBEAT_FLUSH_INTERVAL; sync changes go through the health state machine, so the process runs an outbox relay and needs NATS_URL.'
  static override examples = [
    'NATS_URL=nats://127.0.0.1:4222 DATABASE_URL=postgres://nodeplane@db/nodeplane AGENT_GATEWAY_HOST=0.0.0.0 AGENT_GATEWAY_TLS_CERT_FILE=/etc/nodeplane/gateway.pem AGENT_GATEWAY_TLS_KEY_FILE=/etc/nodeplane/gateway-key.pem <%= config.bin %> daemon agent-gateway',
  ]

  async run(): Promise<{ daemon: string; target: string; ca_file: string | null }> {
    const { config, logger } = await loadSettingsWithSecrets(agentGatewayEnv, this.env(), (level) => createLogger({ level, daemon: 'agent-gateway' }))
    routeGrpcLogs(logger.child({ component: 'grpc' }))
    const resources = new Resources(logger)
    const running = await resources.starting(async () => {
      const bus = resources.add(
        'bus',
        await openEventBus({ settings: config, service: 'control-plane', singleProcess: false, logger, name: 'agent-gateway' }),
        (b) => b.close(),
      )
      const db = resources.add('database', await openDatabase(config.DATABASE_URL, 'nodeplane-agent-gateway', logger), (d) => d.destroy())
      await assertSchemaCurrent(db, 'control-plane')
      resources.add('outbox relay', startRelay(db, bus, config, logger), (r) => r.stop())
      return resources.add('agent gateway', await startAgentGateway(config, { db, logger }), (g) => g.stop())
    })
    installShutdown({ logger, timeoutMs: config.SHUTDOWN_TIMEOUT, stop: () => resources.closeAll() })
    await announceReady(logger, { target: running.target, gateway_id: running.gateway.gatewayId })
    return { daemon: 'agent-gateway', target: running.target, ca_file: running.caFile ?? null }
  }
}
