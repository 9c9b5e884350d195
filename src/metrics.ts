/**
 * Prometheus metrics shared by every daemon. Each daemon makes one registry at boot with
 * `createMetrics('<daemon>')`, registers its own collectors on `metrics.registry`, and serves
 * `metrics.registry.metrics()` (the api-server at GET /metrics).
 *
 * A registry per daemon (never prom-client's global one) keeps `nodeplane up`, which runs every
 * daemon in one process, from mixing their series, and lets tests make as many as they like.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'

export type HttpLabel = 'method' | 'route' | 'status'

export interface Metrics {
  readonly daemon: string
  readonly registry: Registry
  /** `http_requests_total{method,route,status}`: route is the template, never the raw path. */
  readonly httpRequestsTotal: Counter<HttpLabel>
  /** `http_request_duration_seconds{method,route,status}` */
  readonly httpRequestDurationSeconds: Histogram<HttpLabel>
  /** `http_requests_in_flight{method}`: what a graceful stop is still waiting for. */
  readonly httpRequestsInFlight: Gauge<'method'>
}

/** Buckets from 5 ms to 10 s: API calls are database round trips, not long polls. */
export const HTTP_DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

export function createMetrics(daemon: string): Metrics {
  const registry = new Registry()
  registry.setDefaultLabels({ daemon })
  collectDefaultMetrics({ register: registry })

  const httpRequestsTotal = new Counter<HttpLabel>({
    name: 'http_requests_total',
    help: 'HTTP requests answered, by method, route template and status',
    labelNames: ['method', 'route', 'status'],
    registers: [registry],
  })
  const httpRequestDurationSeconds = new Histogram<HttpLabel>({
    name: 'http_request_duration_seconds',
    help: 'Time from receiving an HTTP request to the end of its response handling, in seconds',
    labelNames: ['method', 'route', 'status'],
    buckets: HTTP_DURATION_BUCKETS,
    registers: [registry],
  })
  const httpRequestsInFlight = new Gauge<'method'>({
    name: 'http_requests_in_flight',
    help: 'HTTP requests being handled right now',
    labelNames: ['method'],
    registers: [registry],
  })

  return { daemon, registry, httpRequestsTotal, httpRequestDurationSeconds, httpRequestsInFlight }
}
