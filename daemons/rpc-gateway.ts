/**
 * The `rpc-gateway` daemon (RPC_GATEWAY_PORT, 8545): the customer's endpoint, an authenticated
 * JSON-RPC proxy to their node (docs/rpc-gateway.md). It needs the control-plane database and the
 * chain catalogue (method policies); NATS when configured, to follow node moves at once. Any
 * number may run behind a load balancer: each keeps its own route table, and the rate limit is
 * shared through the database.
 */
import path from 'node:path'
import type { ConnectionOptions } from 'nats'
import type { ChainSource } from '../src/config/chain-source.js'
import type { RpcGatewayConfig } from '../src/config/env.js'
import type { Db } from '../src/db/knex.js'
import { ConfigError } from '../src/errors.js'
import { openHostFleet } from '../src/hosts/fleet.js'
import { readFleetNodeFile } from '../src/provisioning/infrastructure/ssh.js'
import type { EventBus } from '../src/events/bus.js'
import { startHttpServer } from '../src/http/server.js'
import { schedulePeriodicJob } from '../src/jobs/periodic.js'
import type { Logger } from '../src/log.js'
import { createMetrics } from '../src/metrics.js'
import { createRpcHandler } from '../src/rpc-gateway/gateway.js'
import { ChainIdCache } from '../src/rpc-gateway/merge.js'
import { createGatewayMetrics } from '../src/rpc-gateway/metrics.js'
import { createRpcRateLimiter, purgeIdleBuckets } from '../src/rpc-gateway/rate-limit.js'
import { followBusHealthEvents, followNatsHealthEvents, type RouteEvents } from '../src/rpc-gateway/route-events.js'
import { RouteTable } from '../src/rpc-gateway/route-table.js'
import { createUpstreamClient } from '../src/rpc-gateway/upstream.js'
import { createUpstreamHealthRecorder } from '../src/rpc-gateway/upstream-health.js'
import { createUsageRecorder, pruneUsage, USAGE_RETENTION_MS } from '../src/rpc-gateway/usage.js'
import { createWebSocketProxy } from '../src/rpc-gateway/websocket.js'

export type RpcGatewaySettings = Pick<
  RpcGatewayConfig,
  | 'NODEPLANE_DATA_DIR'
  | 'HTTP_HOST'
  | 'RPC_GATEWAY_PORT'
  | 'RPC_GATEWAY_RATE_LIMIT_PER_SECOND'
  | 'RPC_GATEWAY_RATE_LIMIT_BURST'
  | 'RPC_GATEWAY_BODY_LIMIT_BYTES'
  | 'RPC_GATEWAY_MAX_BATCH'
  | 'RPC_GATEWAY_ROUTE_TTL'
  | 'RPC_GATEWAY_UPSTREAM_TIMEOUT'
  | 'RPC_GATEWAY_MAX_SUBSCRIPTIONS'
  | 'RPC_GATEWAY_KEY_RECHECK'
> & { LOCAL_HOSTS_DIR?: string | undefined } & Partial<Pick<RpcGatewayConfig, 'HOSTS_SSH_KEY_DIR' | 'HOSTS_SSH_CONNECT_TIMEOUT' | 'HOSTS_SSH_MAX_SESSIONS'>>

export interface RpcGatewayDeps {
  db: Db
  logger: Logger
  chains: ChainSource
  /** How the route table hears of node moves: the in-process bus (`up`), NATS (a daemon of its own), or neither (the TTL alone). */
  events?: { bus: EventBus } | { natsUrl: string; connection?: ConnectionOptions }
  /** How often usage counted in memory is written to rpc_usage and rpc_upstream_health (default 5 s). */
  usageFlushMs?: number
  now?: () => Date
}

const DEFAULT_USAGE_FLUSH_MS = 5_000

export interface RunningRpcGateway {
  url: string
  routes: RouteTable
  stop(): Promise<void>
}

export async function startRpcGateway(config: RpcGatewaySettings, deps: RpcGatewayDeps): Promise<RunningRpcGateway> {
  const { db, logger } = deps
  const now = deps.now ?? (() => new Date())
  // Fleet hosts are reached over SSH only for chains whose RPC wants a cookie kept on the host;
  // the pool connects on first use.
  const hostFleet = openHostFleet(config)
  const routes = new RouteTable({
    db,
    chains: deps.chains,
    ttlMs: config.RPC_GATEWAY_ROUTE_TTL,
    localHostsDir: config.LOCAL_HOSTS_DIR ?? path.join(config.NODEPLANE_DATA_DIR, 'hosts'),
    fleetFiles: (hostId, relativePath, maxBytes) => readFleetNodeFile({ db, pool: hostFleet.pool, keys: hostFleet.keys }, hostId, relativePath, maxBytes),
    now: () => now().getTime(),
  })
  const limiter = createRpcRateLimiter({
    db,
    perSecond: config.RPC_GATEWAY_RATE_LIMIT_PER_SECOND,
    burst: config.RPC_GATEWAY_RATE_LIMIT_BURST,
    logger,
    now: () => now().getTime(),
  })
  const upstream = createUpstreamClient({ timeoutMs: config.RPC_GATEWAY_UPSTREAM_TIMEOUT })
  const chainIds = new ChainIdCache()
  const usage = createUsageRecorder({ db, logger, flushMs: deps.usageFlushMs ?? DEFAULT_USAGE_FLUSH_MS })
  const upstreamHealth = createUpstreamHealthRecorder({ db, logger, flushMs: deps.usageFlushMs ?? DEFAULT_USAGE_FLUSH_MS, now: () => now().getTime() })
  const metrics = createMetrics('rpc-gateway')
  const usageMetrics = createGatewayMetrics(metrics)
  const handler = createRpcHandler({
    db,
    routes,
    limiter,
    upstream,
    logger,
    metrics,
    usageMetrics,
    bodyLimitBytes: config.RPC_GATEWAY_BODY_LIMIT_BYTES,
    maxBatch: config.RPC_GATEWAY_MAX_BATCH,
    chainIds,
    usage,
    upstreamHealth,
    now,
  })

  const websockets = createWebSocketProxy({
    db,
    routes,
    logger,
    maxPayloadBytes: config.RPC_GATEWAY_BODY_LIMIT_BYTES,
    maxBatch: config.RPC_GATEWAY_MAX_BATCH,
    maxSubscriptions: config.RPC_GATEWAY_MAX_SUBSCRIPTIONS,
    keyRecheckMs: config.RPC_GATEWAY_KEY_RECHECK,
    limiter,
    usage,
    metrics: usageMetrics,
    now,
  })

  const invalidate = (nodeId: string) => {
    routes.invalidate(nodeId)
    chainIds.invalidate(nodeId)
    websockets.nodeChanged(nodeId).catch((err: unknown) => logger.warn({ err, node_id: nodeId }, 'rpc gateway: cannot re-check WebSocket connections'))
  }
  let events: RouteEvents | undefined
  if (deps.events && 'bus' in deps.events) events = await followBusHealthEvents(deps.events.bus, invalidate)
  else if (deps.events) {
    events = await followNatsHealthEvents({ url: deps.events.natsUrl, name: 'rpc-gateway', logger, ...(deps.events.connection ? { connection: deps.events.connection } : {}) }, invalidate)
  } else {
    logger.warn({ ttl_ms: config.RPC_GATEWAY_ROUTE_TTL }, 'NATS_URL not set: routes follow node moves by RPC_GATEWAY_ROUTE_TTL and failed connections only')
  }

  // A full bucket is the same as no row: rows idle for an hour are dropped (one gateway at a time);
  // usage buckets older than USAGE_RETENTION_MS (8 days, the 7d window and a margin) too.
  const housekeeping = schedulePeriodicJob({
    name: 'rpc-rate-bucket-housekeeping',
    cronTime: '45 */5 * * * *',
    leaseMs: 120_000,
    db,
    logger,
    now,
    run: async (at) => {
      const purged = await purgeIdleBuckets(db, at.getTime() - 3_600_000)
      const pruned = await pruneUsage(db, at.getTime() - USAGE_RETENTION_MS)
      if (purged + pruned > 0) logger.debug({ rpc_rate_buckets: purged, rpc_usage: pruned }, 'rpc gateway housekeeping')
    },
  })

  const server = await startHttpServer(
    { callback: () => handler },
    { host: config.HTTP_HOST, port: config.RPC_GATEWAY_PORT, onUpgrade: (req, socket, head) => websockets.handleUpgrade(req, socket, head) },
  ).catch(async (err: NodeJS.ErrnoException) => {
    await housekeeping.stop()
    await events?.close()
    await usage.close()
    await upstreamHealth.close()
    upstream.close()
    await hostFleet.close()
    if (err.code !== 'EADDRINUSE' && err.code !== 'EACCES') throw err
    const why = err.code === 'EADDRINUSE' ? 'is already in use' : 'needs privileges this user lacks'
    throw new ConfigError([`RPC_GATEWAY_PORT: port ${config.RPC_GATEWAY_PORT} on ${config.HTTP_HOST} ${why}; stop whatever listens there or choose another port`])
  })
  logger.info({ url: server.url, events: deps.events ? ('bus' in deps.events ? 'bus' : 'nats') : 'none' }, 'rpc gateway listening')
  return {
    url: server.url,
    routes,
    async stop() {
      websockets.close()
      await server.close()
      await events?.close()
      await housekeeping.stop()
      await usage.close()
      await upstreamHealth.close()
      upstream.close()
      await hostFleet.close()
    },
  }
}
