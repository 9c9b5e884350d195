import { runNodeAgent } from '../../daemons/node-agent-run.js'
import { BaseCommand } from '../../src/cli/base-command.js'
import { loadConfig, nodeAgentEnv } from '../../src/config/env.js'

export default class DaemonNodeAgent extends BaseCommand<typeof DaemonNodeAgent> {
  static override summary = "Run the node agent on a node's host: supervises the chain process and dials the agent-gateway"
  static override description =
    'Needs AGENT_GATEWAY_URL, AGENT_GATEWAY_CA_FILE, NODE_AGENT_NODE_ID, NODE_AGENT_TOKEN_FILE and NODE_AGENT_STATE_DIR. Reconnects with backoff while the gateway is unreachable; exits 77 when the gateway refuses the token or the node is retired, after removing the node state from this host (superseded). With no heartbeat acknowledged by any gateway for NODE_AGENT_FENCE_TIMEOUT (60s) it stops the chain until a gateway answers again (fencing). On SIGTERM the chain process is stopped too.'
  static override examples = [
    'AGENT_GATEWAY_URL=gateway.internal:9090 AGENT_GATEWAY_CA_FILE=/etc/nodeplane/ca.pem NODE_AGENT_NODE_ID=0190f5c2-… NODE_AGENT_TOKEN_FILE=/etc/nodeplane/agent-token NODE_AGENT_STATE_DIR=/var/lib/nodeplane-agent <%= config.bin %> daemon node-agent',
  ]

  async run(): Promise<{ daemon: string; node_id: string }> {
    const config = loadConfig(nodeAgentEnv, this.env())
    await runNodeAgent(config)
    return { daemon: 'node-agent', node_id: config.NODE_AGENT_NODE_ID }
  }
}
