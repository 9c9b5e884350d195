/**
 * The `agent-gateway` daemon: the only door for node agents (gRPC over TLS, port 9090).
 * Any number of gateways may share one database; an agent may reconnect to any of them.
 */
import fs from 'node:fs'
import path from 'node:path'
import * as grpc from '@grpc/grpc-js'
import type { z } from 'zod'
import { AgentGateway } from '../src/agent-gateway/gateway.js'
import { localBlobStore } from '../src/artifacts/blob-store.js'
import { ensureDevCertificates } from '../src/agent-gateway/tls.js'
import { agentGatewayOnlyEnv } from '../src/config/env.js'
import type { Db } from '../src/db/knex.js'
import { ConfigError } from '../src/errors.js'
import type { Logger } from '../src/log.js'

type OnlySettings = z.infer<z.ZodObject<typeof agentGatewayOnlyEnv>>
export type AgentGatewaySettings = OnlySettings & { AGENT_GATEWAY_PORT: number; NODEPLANE_DATA_DIR: string }

export interface RunningAgentGateway {
  gateway: AgentGateway
  /** host:port agents dial */
  target: string
  /** The CA file agents must trust. */
  caFile: string | undefined
  stop(): Promise<void>
}

/** Where `nodeplane up` and a gateway without configured certificates keep the development CA. */
export function devCaDir(dataDir: string): string {
  return path.join(dataDir, 'agent-ca')
}

/** `localStack`: under `nodeplane up` the development CA is the expected choice, not a production mistake to warn about. */
export function gatewayTlsFiles(settings: AgentGatewaySettings, logger: Logger, localStack = false): { certFile: string; keyFile: string; caFile?: string } {
  const cert = settings.AGENT_GATEWAY_TLS_CERT_FILE
  const key = settings.AGENT_GATEWAY_TLS_KEY_FILE
  if (cert || key) {
    if (!cert || !key) throw new ConfigError(['AGENT_GATEWAY_TLS_CERT_FILE and AGENT_GATEWAY_TLS_KEY_FILE: set both, or neither for the development CA'])
    for (const [name, file] of [['AGENT_GATEWAY_TLS_CERT_FILE', cert], ['AGENT_GATEWAY_TLS_KEY_FILE', key]] as const) {
      if (!fs.existsSync(file)) throw new ConfigError([`${name}=${JSON.stringify(file)}: file not found`])
    }
    return { certFile: cert, keyFile: key }
  }
  const files = ensureDevCertificates(devCaDir(settings.NODEPLANE_DATA_DIR))
  logger[localStack ? 'info' : 'warn']({ ca_file: files.caFile }, 'serving agents with the development CA; set AGENT_GATEWAY_TLS_CERT_FILE and AGENT_GATEWAY_TLS_KEY_FILE in production')
  return files
}

export async function startAgentGateway(settings: AgentGatewaySettings, deps: { db: Db; logger: Logger; now?: () => Date; localStack?: boolean }): Promise<RunningAgentGateway> {
  const files = gatewayTlsFiles(settings, deps.logger, deps.localStack)
  const cert = fs.readFileSync(files.certFile)
  const key = fs.readFileSync(files.keyFile)
  const gateway = new AgentGateway({
    db: deps.db,
    logger: deps.logger,
    heartbeatIntervalSeconds: Math.max(1, Math.round(settings.AGENT_HEARTBEAT_INTERVAL / 1_000)),
    progressCheckIntervalSeconds: Math.max(1, Math.round(settings.AGENT_PROGRESS_CHECK_INTERVAL / 1_000)),
    heartbeatFlushIntervalMs: settings.HEARTBEAT_FLUSH_INTERVAL,
    commandPollIntervalMs: settings.AGENT_COMMAND_POLL_INTERVAL,
    syncChangeLimit: { maxChanges: settings.AGENT_SYNC_CHANGE_LIMIT, windowMs: settings.AGENT_SYNC_CHANGE_WINDOW },
    // The store `nodeplane artifact add` writes and the api-server resolves rollouts against.
    artifacts: localBlobStore(settings.NODEPLANE_DATA_DIR),
    ...(deps.now ? { now: deps.now } : {}),
  })
  const port = await gateway
    .listen(settings.AGENT_GATEWAY_HOST, settings.AGENT_GATEWAY_PORT, grpc.ServerCredentials.createSsl(null, [{ private_key: key, cert_chain: cert }], false))
    .catch((err: Error) => {
      throw bindError(err, settings.AGENT_GATEWAY_HOST, settings.AGENT_GATEWAY_PORT)
    })
  const host = settings.AGENT_GATEWAY_HOST === '0.0.0.0' || settings.AGENT_GATEWAY_HOST === '::' ? '127.0.0.1' : settings.AGENT_GATEWAY_HOST
  return { gateway, target: `${host.includes(':') ? `[${host}]` : host}:${port}`, caFile: files.caFile, stop: () => gateway.close() }
}

/**
 * grpc-js reports a failed bind as a plain Error without a `code`, its message naming the
 * socket error ("No address added out of total 1 resolved errors: [listen EADDRINUSE: address
 * already in use 127.0.0.1:9090]"). A port in use or one needing privileges is a configuration
 * error (exit 78, not retried by systemd), as the HTTP daemons report theirs; anything else (an
 * address not there yet, a name not resolving) is passed on and retried.
 */
function bindError(err: Error, host: string, port: number): Error {
  const message = err.message
  if (message.includes('EADDRINUSE') || message.includes('EACCES')) {
    const why = message.includes('EADDRINUSE') ? 'is already in use' : 'needs privileges this user lacks'
    return new ConfigError([`AGENT_GATEWAY_PORT: port ${port} on ${host} ${why}; stop whatever listens there or choose another port`])
  }
  return err
}
