/**
 * The agent's side of FetchArtifact (proto/agent.proto; docs/artifacts.md, "Serving artifacts to
 * agents"): a stored artifact's bytes from the agent-gateway, over the same TLS and with the same
 * node token as the agent's session. Several gateways (AGENT_GATEWAY_URL) are tried in turn while
 * one is unreachable; an answer (not found, refused) is final. The bytes are written as they
 * come; the caller verifies the checksum and the release signature.
 */
import fs from 'node:fs'
import { Transform } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import * as grpc from '@grpc/grpc-js'
import { agentGatewayService, agentMetadata } from '../agent-gateway/grpc.js'
import type { StoredArtifactRef } from '../artifacts/stored-url.js'

export interface StoredArtifactFetcher {
  /** Writes the artifact's bytes to `file`; rejects (a grpc status error) when the gateway does not serve them. */
  fetchTo(ref: StoredArtifactRef, file: string, signal: AbortSignal): Promise<void>
}

export interface GatewayFetcherOptions {
  /** AGENT_GATEWAY_URL: host:port, or several comma-separated. */
  target: string
  /** PEM of the CA that signed the gateway's certificate. */
  ca: Buffer
  serverName?: string
  nodeId: string
  token: string
}

/** Codes that say this gateway could not answer, so another may. */
const UNREACHABLE = new Set([grpc.status.UNAVAILABLE, grpc.status.DEADLINE_EXCEEDED])

type FetchClient = grpc.Client & {
  FetchArtifact(request: StoredArtifactRef, metadata: grpc.Metadata): grpc.ClientReadableStream<{ data: Buffer }>
}

export function gatewayArtifactFetcher(options: GatewayFetcherOptions): StoredArtifactFetcher {
  const targets = options.target.split(',').map((t) => t.trim()).filter((t) => t.length > 0)
  const channelOptions: grpc.ChannelOptions = options.serverName
    ? { 'grpc.ssl_target_name_override': options.serverName, 'grpc.default_authority': options.serverName }
    : {}

  async function fetchFrom(target: string, ref: StoredArtifactRef, file: string, signal: AbortSignal): Promise<void> {
    const Service = agentGatewayService()
    const client = new Service(target, grpc.credentials.createSsl(options.ca), channelOptions) as unknown as FetchClient
    try {
      const call = client.FetchArtifact(ref, agentMetadata(options.nodeId, options.token))
      const cancel = () => call.cancel()
      signal.addEventListener('abort', cancel, { once: true })
      try {
        const bytes = new Transform({ writableObjectMode: true, transform: (chunk: { data: Buffer }, _enc, done) => done(null, chunk.data) })
        await pipeline(call, bytes, fs.createWriteStream(file, { mode: 0o644 }))
      } finally {
        signal.removeEventListener('abort', cancel)
      }
    } finally {
      client.close()
    }
  }

  return {
    async fetchTo(ref, file, signal) {
      let last: unknown
      for (const target of targets) {
        try {
          await fetchFrom(target, ref, file, signal)
          return
        } catch (err) {
          last = err
          const code = (err as Partial<grpc.StatusObject>).code
          if (signal.aborted || code === undefined || !UNREACHABLE.has(code)) throw err
        }
      }
      throw last
    },
  }
}
