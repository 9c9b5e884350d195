/**
 * Routes every api-server has, none needing authentication: liveness, readiness, metrics and
 * the OpenAPI document. /health never touches a dependency (a slow database must not get the
 * process restarted); /readyz does (it takes the instance out of rotation instead).
 */
import type { Metrics } from '../metrics.js'
import type { OpenApiDocument } from './openapi.js'
import { OPENAPI_PATH } from './openapi.js'
import type { Readiness } from './readiness.js'
import { defineRoute, type ApiRoute } from './route.js'
import { z } from './zod.js'

const healthBody = z.object({ status: z.literal('healthy') }).openapi('Health')

const componentStatus = z
  .object({
    status: z.enum(['up', 'down']),
    error: z.string().optional().openapi({ description: 'Why the component is down' }),
    warning: z.string().optional().openapi({ description: 'What an operator must know even when it is up' }),
    methods: z.array(z.string()).optional().openapi({ description: 'A payment provider: the methods it takes' }),
  })
  .openapi('ComponentStatus')

/** database, bus, and a server's own components (the payment service's `provider:<name>`). */
const components = z.object({ database: componentStatus, bus: componentStatus.optional() }).catchall(componentStatus)

const readyBody = z
  .object({
    status: z.enum(['ready', 'degraded']).openapi({ description: '`degraded`: ready, with a component it serves without (the event bus) down' }),
    degraded: z.array(z.string()).optional().openapi({ description: 'The components down that the server serves without; their events wait in the outbox' }),
    components,
  })
  .openapi('Ready')

const notReadyBody = z
  .object({
    status: z.literal('not_ready'),
    error: z.literal('not ready'),
    details: z.string().openapi({ description: 'Each failing component and its error' }),
    components,
  })
  .openapi('NotReady')

const openApiBody = z.object({ openapi: z.string() }).passthrough()

export interface SystemRouteDeps {
  readiness: () => Promise<Readiness>
  metrics: Metrics
  openapi: () => OpenApiDocument
}

export function systemRoutes(deps: SystemRouteDeps): ApiRoute[] {
  return [
    defineRoute({
      method: 'get',
      path: '/health',
      summary: 'Liveness: the process answers',
      tags: ['system'],
      auth: 'none',
      responses: { 200: healthBody },
    }).handle(async () => ({ status: 200, body: { status: 'healthy' } })),
    defineRoute({
      method: 'get',
      path: '/readyz',
      summary: 'Readiness: the database and the server\'s own dependencies (payment providers) reachable; the event bus reported, not required',
      tags: ['system'],
      auth: 'none',
      responses: {
        200: { description: 'Ready to serve', schema: readyBody },
        503: { description: 'A component is down', schema: notReadyBody },
      },
    }).handle(async ({ log }) => {
      const { ready, degraded, components } = await deps.readiness()
      if (ready && degraded.length === 0) return { status: 200, body: { status: 'ready', components } }
      // Not logged: the bus client logs its own disconnection, and probes come every few seconds.
      if (ready) return { status: 200, body: { status: 'degraded', degraded, components } }
      const details = Object.entries(components)
        .filter(([, c]) => c.status === 'down')
        .map(([name, c]) => `${name}: ${c.error ?? 'down'}`)
        .join('; ')
      log.warn({ components }, 'not ready')
      return { status: 503, body: { status: 'not_ready', error: 'not ready', details, components } }
    }),
    defineRoute({
      method: 'get',
      path: '/metrics',
      summary: 'Prometheus metrics',
      tags: ['system'],
      auth: 'none',
      responses: {
        200: { description: 'Prometheus text exposition format', schema: z.string(), contentType: deps.metrics.registry.contentType },
      },
    }).handle(async () => ({ status: 200, body: await deps.metrics.registry.metrics() })),
    defineRoute({
      method: 'get',
      path: OPENAPI_PATH,
      summary: 'This OpenAPI 3.1 document',
      tags: ['system'],
      auth: 'none',
      responses: { 200: { description: 'OpenAPI 3.1 document', schema: openApiBody } },
    }).handle(async () => ({ status: 200, body: { ...deps.openapi() } })),
  ]
}
