/**
 * One agent-gateway in a process of its own, for bench/recovery.ts (the bench kills it with
 * SIGKILL and starts it again on the same port). Environment: DATABASE_URL, PORT, TLS_DIR (the
 * development CA and certificate the bench made). Writes `ready <epoch ms>` once it listens.
 * BENCH_GATEWAY_LOG=<file> appends its info lines to that file.
 */
import fs from 'node:fs'
import * as grpc from '@grpc/grpc-js'
import { AgentGateway } from '../../src/agent-gateway/gateway.js'
import { ensureDevCertificates, readTlsMaterial } from '../../src/agent-gateway/tls.js'
import { createDatabase } from '../../src/db/knex.js'
import { createLogger } from '../../src/log.js'

const { DATABASE_URL, PORT, TLS_DIR } = process.env
if (!DATABASE_URL || !PORT || !TLS_DIR) throw new Error('gateway-process: DATABASE_URL, PORT and TLS_DIR are required')

const tls = readTlsMaterial(ensureDevCertificates(TLS_DIR))
const gateway = new AgentGateway({
  db: createDatabase(DATABASE_URL),
  // BENCH_GATEWAY_LOG=<file>: the gateway's info lines there, to see where a slow reconnection goes.
  logger: process.env.BENCH_GATEWAY_LOG
    ? createLogger({ level: 'info', destination: fs.createWriteStream(process.env.BENCH_GATEWAY_LOG, { flags: 'a' }) })
    : createLogger({ level: 'warn' }),
  // The production intervals (AGENT_HEARTBEAT_INTERVAL, HEARTBEAT_FLUSH_INTERVAL, AGENT_PROGRESS_CHECK_INTERVAL).
  heartbeatIntervalSeconds: 15,
  progressCheckIntervalSeconds: 30,
  heartbeatFlushIntervalMs: 25,
  commandPollIntervalMs: 250,
})
await gateway.listen('127.0.0.1', Number(PORT), grpc.ServerCredentials.createSsl(null, [{ private_key: tls.key, cert_chain: tls.cert }], false))
process.stdout.write(`ready ${Date.now()}\n`)
