/**
 * proto/agent.proto loaded at run time (no generated code to keep in step), with the message
 * shapes as TypeScript types. Field names stay snake_case as in the proto.
 */
import path from 'node:path'
import * as grpc from '@grpc/grpc-js'
import * as protoLoader from '@grpc/proto-loader'
import { packageRoot } from '../package-root.js'

export interface RegisterRequest {
  agent_version: string
  binary_version: string
  hostname: string
  agent_public_key: Buffer
}

export interface RegisterResponse {
  node_id: string
  heartbeat_interval_seconds: number
  progress_check_interval_seconds: number
}

export interface HeartbeatMessage {
  sent_at_unix_ms: number
  agent_version: string
  binary_version: string
  running_command_ids: string[]
  sync_status: string
  metrics: Record<string, number>
  process_state: string
  restarts_in_window: number
  /** 0 when no chain process runs (proto3 default); older agents never set it. */
  chain_pid?: number
}

export type AgentMessage =
  | { body: 'heartbeat'; heartbeat: HeartbeatMessage }
  | { body: 'ack'; ack: { command_id: string } }
  | { body: 'progress'; progress: { command_id: string; phase: string; message: string; stall_count: number; stalled: boolean } }
  | { body: 'completed'; completed: { command_id: string; result_json: string } }
  | { body: 'failed'; failed: { command_id: string; error: string; result_json: string } }

export interface CommandMessage {
  command_id: string
  type: string
  payload_json: string
}

export type GatewayMessage = { body: 'command'; command: CommandMessage } | { body: 'heartbeat_ack'; heartbeat_ack: { sent_at_unix_ms: number } }

/** Outgoing messages: a proto3 oneof member is set by its name. */
export type AgentMessageOut =
  | { heartbeat: HeartbeatMessage }
  | { ack: { command_id: string } }
  | { progress: { command_id: string; phase: string; message: string; stall_count: number; stalled: boolean } }
  | { completed: { command_id: string; result_json: string } }
  | { failed: { command_id: string; error: string; result_json: string } }

export const NODE_ID_METADATA = 'x-node-id'

let cached: grpc.ServiceClientConstructor | undefined

export function agentGatewayService(): grpc.ServiceClientConstructor {
  if (cached) return cached
  const definition = protoLoader.loadSync(path.join(packageRoot(), 'proto', 'agent.proto'), {
    keepCase: true,
    longs: Number,
    enums: String,
    defaults: true,
    oneofs: true,
  })
  const loaded = grpc.loadPackageDefinition(definition) as unknown as {
    nodeplane: { agent: { v1: { AgentGateway: grpc.ServiceClientConstructor } } }
  }
  cached = loaded.nodeplane.agent.v1.AgentGateway
  return cached
}

/** Metadata every agent call carries. */
export function agentMetadata(nodeId: string, token: string): grpc.Metadata {
  const metadata = new grpc.Metadata()
  metadata.set(NODE_ID_METADATA, nodeId)
  metadata.set('authorization', `Bearer ${token}`)
  return metadata
}

export function readAgentCredentials(metadata: grpc.Metadata): { nodeId: string | undefined; token: string | undefined } {
  const nodeId = metadata.get(NODE_ID_METADATA)[0]
  const authorization = metadata.get('authorization')[0]
  const token = typeof authorization === 'string' && authorization.startsWith('Bearer ') ? authorization.slice(7).trim() : undefined
  return { nodeId: typeof nodeId === 'string' ? nodeId : undefined, token }
}
