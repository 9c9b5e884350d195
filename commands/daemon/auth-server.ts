import { startAuthServer } from '../../daemons/auth-server.js'
import { openDatabase } from '../../daemons/runtime.js'
import { BaseCommand } from '../../src/cli/base-command.js'
import { authServerEnv } from '../../src/config/env.js'
import { loadSettingsWithSecrets } from '../../src/secrets/load-settings.js'
import { Resources } from '../../src/daemon/resources.js'
import { ConfigError } from '../../src/errors.js'
import { installShutdown } from '../../src/daemon/shutdown.js'
import { announceReady } from '../../src/daemon/sd-notify.js'
import { assertSchemaCurrent } from '../../src/db/schema-check.js'
import { createLogger } from '../../src/log.js'

export default class DaemonAuthServer extends BaseCommand<typeof DaemonAuthServer> {
  static override summary = 'Run the auth-server daemon: identity-provider webhook, wallet sign-in, token refresh (port AUTH_SERVER_PORT, 8081)'
  static override description =
    'Needs a migrated control-plane database, and no NATS. AUTH_PROVIDER chooses what it serves (idp: the webhook; siwe: ' +
    'wallet sign-in; both). Every instance behind one API server must share AUTH_SIGNING_KEY_FILE. See docs/auth.md.'
  static override examples = [
    'AUTH_PROVIDER=both AUTH_IDP_WEBHOOK_SIGNING_SECRET=whsec_... DATABASE_URL=postgres://nodeplane@db/nodeplane <%= config.bin %> daemon auth-server',
  ]

  async run(): Promise<{ daemon: string; url: string }> {
    const { config, logger } = await loadSettingsWithSecrets(authServerEnv, this.env(), (level) => createLogger({ level, daemon: 'auth-server' }))
    // In production the identity provider's webhook is how users come to exist; a server in a
    // mode that serves it must be able to verify it. (`nodeplane up` only warns: a laptop has none.)
    if (config.AUTH_PROVIDER !== 'siwe' && !config.AUTH_IDP_WEBHOOK_SIGNING_SECRET) {
      throw new ConfigError([
        `AUTH_IDP_WEBHOOK_SIGNING_SECRET: required with AUTH_PROVIDER=${config.AUTH_PROVIDER} (the identity-provider webhook creates users); set it to the provider's whsec_… secret, or use AUTH_PROVIDER=siwe`,
      ])
    }
    const resources = new Resources(logger)
    const url = await resources.starting(async () => {
      const db = resources.add('database', await openDatabase(config.DATABASE_URL, 'nodeplane-auth-server', logger), (d) => d.destroy())
      await assertSchemaCurrent(db, 'control-plane')
      const server = resources.add('http server', await startAuthServer(config, { db, logger }), (s) => s.stop())
      return server.url
    })
    installShutdown({ logger, timeoutMs: config.SHUTDOWN_TIMEOUT, stop: () => resources.closeAll() })
    await announceReady(logger, { url })
    return { daemon: 'auth-server', url }
  }
}
