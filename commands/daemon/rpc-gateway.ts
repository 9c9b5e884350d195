import { startRpcGateway } from '../../daemons/rpc-gateway.js'
import { openDatabase } from '../../daemons/runtime.js'
import { BaseCommand } from '../../src/cli/base-command.js'
import { openChainCatalogueFromSettings } from '../../src/config/chain-source.js'
import { rpcGatewayEnv } from '../../src/config/env.js'
import { loadSettingsWithSecrets } from '../../src/secrets/load-settings.js'
import { Resources } from '../../src/daemon/resources.js'
import { installShutdown } from '../../src/daemon/shutdown.js'
import { announceReady } from '../../src/daemon/sd-notify.js'
import { assertSchemaCurrent } from '../../src/db/schema-check.js'
import { createLogger } from '../../src/log.js'
import { natsConnectionSettings } from '../../src/events/nats-connection.js'

export default class DaemonRpcGateway extends BaseCommand<typeof DaemonRpcGateway> {
  static override summary = "Run the rpc-gateway daemon: the customers' authenticated JSON-RPC endpoints to their nodes (port RPC_GATEWAY_PORT, 8545)"
  static override description =
    'Serves POST /v1/{node_id} (API key with scope nodes:rpc in X-API-Key or Authorization: Bearer, or /v1/{node_id}/{key}) and proxies to the node on its current host, ' +
    "with the chain profile's method policy and per-key rate, body and batch limits. Needs a migrated control-plane database; with NATS_URL it follows node moves at once, " +
    'without it within RPC_GATEWAY_ROUTE_TTL. Several may run behind a load balancer. See docs/rpc-gateway.md.'
  static override examples = [
    'NATS_URL=nats://127.0.0.1:4222 DATABASE_URL=postgres://nodeplane@db/nodeplane HTTP_HOST=0.0.0.0 <%= config.bin %> daemon rpc-gateway',
  ]

  async run(): Promise<{ daemon: string; url: string }> {
    const { config, logger } = await loadSettingsWithSecrets(rpcGatewayEnv, this.env(), (level) => createLogger({ level, daemon: 'rpc-gateway' }))
    const resources = new Resources(logger)
    const url = await resources.starting(async () => {
      const db = resources.add('database', await openDatabase(config.DATABASE_URL, 'nodeplane-rpc-gateway', logger), (d) => d.destroy())
      await assertSchemaCurrent(db, 'control-plane')
      const chains = resources.add('chain catalogue', await openChainCatalogueFromSettings(config, logger), (c) => c.close())
      const gateway = resources.add(
        'rpc gateway',
        await startRpcGateway(config, { db, logger, chains, ...(config.NATS_URL ? { events: { natsUrl: config.NATS_URL, connection: natsConnectionSettings(config, 'control-plane') } } : {}) }),
        (g) => g.stop(),
      )
      return gateway.url
    })
    installShutdown({ logger, timeoutMs: config.SHUTDOWN_TIMEOUT, stop: () => resources.closeAll() })
    await announceReady(logger, { url })
    return { daemon: 'rpc-gateway', url }
  }
}
