/** The `api-server` daemon: the public REST API on API_SERVER_PORT (8080). */
import type { Db } from '../src/db/knex.js'
import { ConfigError } from '../src/errors.js'
import type { EventBus } from '../src/events/bus.js'
import { createApiApp } from '../src/http/app.js'
import { startHttpServer } from '../src/http/server.js'
import type { Logger } from '../src/log.js'
import { createMetrics } from '../src/metrics.js'

export interface ApiServerSettings {
  API_SERVER_PORT: number
  HTTP_HOST: string
  HTTP_BODY_LIMIT_BYTES: number
}

export interface RunningServer {
  url: string
  stop(): Promise<void>
}

export async function startApiServer(settings: ApiServerSettings, deps: { db: Db; bus: EventBus; logger: Logger }): Promise<RunningServer> {
  const metrics = createMetrics('api-server')
  const app = createApiApp({ db: deps.db, bus: deps.bus, logger: deps.logger, metrics, bodyLimitBytes: settings.HTTP_BODY_LIMIT_BYTES })
  const server = await startHttpServer(app, { host: settings.HTTP_HOST, port: settings.API_SERVER_PORT }).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'EADDRINUSE' && err.code !== 'EACCES') throw err
    const why = err.code === 'EADDRINUSE' ? 'is already in use' : 'needs privileges this user lacks'
    throw new ConfigError([`API_SERVER_PORT: port ${settings.API_SERVER_PORT} on ${settings.HTTP_HOST} ${why}; stop whatever listens there or choose another port`])
  })
  return { url: server.url, stop: () => server.close() }
}
