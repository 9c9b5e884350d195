/**
 * The node agent as a process, for both ways it is started: `nodeplane daemon node-agent`
 * (commands/daemon/node-agent.ts) and the one-file agent on fleet hosts (node-agent-main.ts).
 * Exit 77 (EX_NOPERM) when the gateway refused this agent (bad token, superseded by a migration,
 * retired node): restarting cannot help, and systemd's RestartPreventExitStatus=77 keeps it down.
 */
import { EXIT } from '../src/cli/exit-codes.js'
import { routeGrpcLogs } from '../src/daemon/grpc-logs.js'
import { Resources } from '../src/daemon/resources.js'
import { installShutdown } from '../src/daemon/shutdown.js'
import { createLogger } from '../src/log.js'
import { startNodeAgent, SupersededError, type NodeAgentSettings } from './node-agent.js'

export async function runNodeAgent(config: NodeAgentSettings): Promise<void> {
  const logger = createLogger({ level: config.LOG_LEVEL, daemon: 'node-agent' }).child({ node_id: config.NODE_AGENT_NODE_ID })
  routeGrpcLogs(logger.child({ component: 'grpc' }))
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
