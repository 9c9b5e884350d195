/**
 * Simulated node agents in a process of their own, for bench/recovery.ts: real `AgentClient`s
 * (the production reconnect policy) with a fixed host report and no commands. The parent sends
 * `{ targets, caFile, agents: [{ nodeId, token }] }` over IPC; this process answers
 * `{ connected, reconnected }` every 100 ms and, asked `report`, the epoch ms at which each agent
 * that lost its stream had it back.
 */
import fs from 'node:fs'
import { AgentClient, type AgentHost, type CommandRunner, type HostSnapshot } from '../../src/node-agent/client.js'
import { createLogger } from '../../src/log.js'
import { generateBoxKeyPair } from '../../src/secrets/sealed-box.js'

interface Setup {
  targets: string
  caFile: string
  agents: Array<{ nodeId: string; token: string }>
}

const host: AgentHost = {
  snapshot: async (): Promise<HostSnapshot> => ({ binary_version: '1.0.0', process_state: 'running', restarts_in_window: 0, sync_status: 'synced', metrics: { block_height: 1 } }),
}
const runner: CommandRunner = { execute: async () => null }
const logger = createLogger({ level: (process.env.BENCH_AGENT_LOG_LEVEL as 'debug' | undefined) ?? 'silent' })

process.once('message', (setup: Setup) => {
  const ca = fs.readFileSync(setup.caFile)
  const clients = setup.agents.map(
    ({ nodeId, token }) =>
      new AgentClient({ target: setup.targets, ca, nodeId, token, agentVersion: '0.1.0-bench', publicKey: generateBoxKeyPair().publicKey, host, runner, logger }),
  )
  // First connections a hundred at a time: the bench measures the reconnection, not a fleet
  // registering at once (each agent's first Register is an unbatched write).
  void (async () => {
    for (let i = 0; i < clients.length; i += 100) await Promise.all(clients.slice(i, i + 100).map((c) => c.start()))
  })()
  const lost = new Set<number>()
  const back = new Map<number, number>()
  const everConnected = new Set<number>()
  const watch = setInterval(() => {
    const now = Date.now()
    clients.forEach((client, i) => {
      if (client.connected) {
        everConnected.add(i)
        if (lost.has(i)) {
          lost.delete(i)
          back.set(i, now)
        }
      } else if (everConnected.has(i) && !back.has(i)) {
        lost.add(i)
      }
    })
  }, 10)
  const status = setInterval(() => process.send?.({ connected: clients.filter((c) => c.connected).length, reconnected: back.size }), 100)
  process.on('message', (message: string) => {
    if (message === 'report') process.send?.({ times: [...back.values()] })
    if (message === 'stop') {
      clearInterval(watch)
      clearInterval(status)
      void Promise.all(clients.map((c) => c.stop())).then(() => process.exit(0))
    }
  })
})
