/**
 * grpc-js prints its own diagnostics to stderr as text ("E <time> | server | No address added …"),
 * where they break a daemon's one-JSON-object-per-line output and a terminal's one-line reason.
 * Every process that serves or calls gRPC routes them into its logger instead.
 */
import { format } from 'node:util'
import * as grpc from '@grpc/grpc-js'
import type { Logger } from '../log.js'

/** gRPC's own diagnostics become `warn` lines of `logger`. */
export function routeGrpcLogs(logger: Logger): void {
  grpc.setLogger({ error: (...args: unknown[]) => logger.warn(format(...args)) })
}
