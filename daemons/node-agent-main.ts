/**
 * The node agent as one self-contained file for hosts that have only Node.js: the `ssh` provider
 * uploads `dist/agent/node-agent.mjs` (built by scripts/agent-bundle.js) and runs
 * `node node-agent-<sha256>.mjs daemon node-agent`. It does what `nodeplane daemon node-agent`
 * does (commands/daemon/node-agent.ts), without the CLI around it: the same settings from the
 * environment, exit 77 when the gateway refused the agent (a restart cannot help; systemd's
 * RestartPreventExitStatus=77 and the detached restart loop both stop there), 78 for bad
 * settings, 128 + signal after a stop.
 */
import { EXIT } from '../src/cli/exit-codes.js'
import { loadConfig, nodeAgentEnv } from '../src/config/env.js'
import { Resources } from '../src/daemon/resources.js'
import { installShutdown } from '../src/daemon/shutdown.js'
import { ConfigError } from '../src/errors.js'
import { createLogger } from '../src/log.js'
import { startNodeAgent, SupersededError, type NodeAgentSettings } from './node-agent.js'

function settings(): NodeAgentSettings {
  try {
    return loadConfig(nodeAgentEnv, process.env)
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`)
    process.exit(err instanceof ConfigError ? EXIT.config : EXIT.failure)
  }
}

async function main(): Promise<void> {
  const config = settings()
  const logger = createLogger({ level: config.LOG_LEVEL, daemon: 'node-agent' }).child({ node_id: config.NODE_AGENT_NODE_ID })
  const resources = new Resources(logger)
  const superseded = (reason: string) => {
    logger.fatal({ reason }, 'the agent-gateway refused this agent; exiting')
    void resources.closeAll().finally(() => process.exit(EXIT.refused))
  }
  try {
    await resources.starting(async () => {
      resources.add('node agent', await startNodeAgent(config, { logger, onSuperseded: superseded }), (a) => a.stop())
    })
  } catch (err) {
    if (!(err instanceof SupersededError)) throw err
    logger.fatal({ reason: err.message }, 'superseded; exiting')
    process.exit(EXIT.refused)
  }
  installShutdown({ logger, timeoutMs: config.SHUTDOWN_TIMEOUT, stop: () => resources.closeAll() })
  logger.info({ gateway: config.AGENT_GATEWAY_URL, state_dir: config.NODE_AGENT_STATE_DIR }, 'ready')
}

main().catch((err: unknown) => {
  process.stderr.write(`node agent: ${err instanceof Error ? err.message : String(err)}\n`)
  process.exit(err instanceof ConfigError ? EXIT.config : EXIT.failure)
})
