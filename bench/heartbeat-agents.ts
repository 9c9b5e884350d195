/**
 * The simulated agents of the heartbeat benchmark (bench/heartbeats.ts), in a process of their own
 * so that the gateway's event loop is the gateway's alone. Run with `node --import tsx`; argv[2] is
 * a JSON file: the gateway's port, its CA (PEM), the agents' node ids and tokens, the rate and the
 * seconds. Protocol on stdio: prints `connected` once every stream is open, starts sending on a
 * `go` line on stdin, prints `{"sent": N}` when done, and ends its streams when stdin closes.
 */
import fs from 'node:fs'
import readline from 'node:readline'
import * as grpc from '@grpc/grpc-js'
import { agentGatewayService, agentMetadata, type AgentMessageOut, type GatewayMessage } from '../src/agent-gateway/grpc.js'

export interface HeartbeatAgentsPlan {
  port: number
  caPem: string
  agents: Array<{ nodeId: string; token: string }>
  rate: number
  seconds: number
}

type Stream = grpc.ClientDuplexStream<AgentMessageOut, GatewayMessage>

const plan = JSON.parse(fs.readFileSync(process.argv[2] as string, 'utf8')) as HeartbeatAgentsPlan
const Service = agentGatewayService()
const channels = Array.from(
  { length: 8 },
  () => new Service(`127.0.0.1:${plan.port}`, grpc.credentials.createSsl(Buffer.from(plan.caPem))) as unknown as grpc.Client & { Connect(m: grpc.Metadata): Stream },
)
const streams: Stream[] = []
for (let i = 0; i < plan.agents.length; i += 200) {
  const opened = await Promise.all(
    plan.agents.slice(i, i + 200).map(({ nodeId, token }, j) => {
      const stream = channels[(i + j) % channels.length]!.Connect(agentMetadata(nodeId, token))
      return new Promise<Stream>((resolve, reject) => {
        stream.once('metadata', () => resolve(stream))
        stream.once('error', reject)
      })
    }),
  )
  streams.push(...opened)
}
process.stdout.write('connected\n')

const lines = readline.createInterface({ input: process.stdin })
lines.once('line', () => {
  const started = Date.now()
  let sent = 0
  let next = 0
  const timer = setInterval(() => {
    const elapsed = (Date.now() - started) / 1_000
    const due = Math.min(Math.floor(elapsed * plan.rate), Math.floor(plan.seconds * plan.rate))
    for (; sent < due; sent++) {
      streams[next++ % streams.length]!.write({
        heartbeat: {
          sent_at_unix_ms: Date.now(), agent_version: '0.1.0', binary_version: '1.0.0', running_command_ids: [], sync_status: 'synced',
          metrics: { block_height: 1234567, peer_count: 12, rpc_latency_ms: 3, rpc_up: 1 }, process_state: 'running', restarts_in_window: 0,
        },
      })
    }
    if (elapsed >= plan.seconds) {
      clearInterval(timer)
      process.stdout.write(`${JSON.stringify({ sent, seconds: (Date.now() - started) / 1_000 })}\n`)
    }
  }, 5)
})
lines.once('close', () => {
  for (const stream of streams) stream.end()
  for (const channel of channels) channel.close()
  process.exit(0)
})
