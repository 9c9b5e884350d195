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
import { ConfigError } from '../src/errors.js'
import type { NodeAgentSettings } from './node-agent.js'
import { runNodeAgent } from './node-agent-run.js'

function settings(): NodeAgentSettings {
  try {
    return loadConfig(nodeAgentEnv, process.env)
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`)
    process.exit(err instanceof ConfigError ? EXIT.config : EXIT.failure)
  }
}

async function main(): Promise<void> {
  await runNodeAgent(settings())
}

main().catch((err: unknown) => {
  process.stderr.write(`node agent: ${err instanceof Error ? err.message : String(err)}\n`)
  process.exit(err instanceof ConfigError ? EXIT.config : EXIT.failure)
})
