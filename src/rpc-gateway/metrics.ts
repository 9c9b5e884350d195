/**
 * The gateway's usage on /metrics, per node and per API key (ids only), for HTTP requests and
 * WebSocket calls (docs/rpc-gateway.md, "Usage on /metrics"). Made once per gateway and shared by
 * the HTTP handler and the WebSocket proxy: a registry takes each metric name once. Series are
 * labelled only once the key is valid and the node is the caller's, so made-up ids in paths
 * cannot grow them.
 */
import { Counter, Histogram } from 'prom-client'
import type { Metrics } from '../metrics.js'

/** 1 ms to 10 s: an RPC through the gateway is a local proxy hop plus the node's own time. */
const RPC_DURATION_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10]

/** A WebSocket call's end: `ok` the node answered with a result, `error` with an error object or not before the connection closed, `refused` by the gateway (method policy, rate, subscription limit). */
export type WebSocketCallOutcome = 'ok' | 'error' | 'refused'

export function createGatewayMetrics(metrics: Metrics) {
  const registers = [metrics.registry]
  return {
    requests: new Counter<'node_id' | 'api_key_id' | 'outcome'>({
      name: 'rpc_gateway_requests_total',
      help: "HTTP requests to a node's endpoint by node, API key and outcome (ok: answered by the node; refused: by the gateway; error: the node failed or was unreachable)",
      labelNames: ['node_id', 'api_key_id', 'outcome'],
      registers,
    }),
    calls: new Counter<'node_id' | 'api_key_id'>({
      name: 'rpc_gateway_calls_total',
      help: 'JSON-RPC calls over HTTP (a batch counts each) by node and API key',
      labelNames: ['node_id', 'api_key_id'],
      registers,
    }),
    duration: new Histogram<'node_id'>({
      name: 'rpc_gateway_request_duration_seconds',
      help: "Time to answer an HTTP request to a node's endpoint, by node",
      labelNames: ['node_id'],
      buckets: RPC_DURATION_BUCKETS,
      registers,
    }),
    merged: new Counter<'node_id'>({
      name: 'rpc_gateway_merged_calls_total',
      help: 'Read calls answered with the answer of an identical call already on its way to the node, by node',
      labelNames: ['node_id'],
      registers,
    }),
    cached: new Counter<'node_id'>({
      name: 'rpc_gateway_cached_calls_total',
      help: "eth_chainId / net_version calls answered from the gateway's memory, by node",
      labelNames: ['node_id'],
      registers,
    }),
    websocketCalls: new Counter<'node_id' | 'api_key_id' | 'outcome'>({
      name: 'rpc_gateway_websocket_calls_total',
      help: 'JSON-RPC calls over WebSocket (each call of a batch frame) by node, API key and outcome (ok: the node answered a result; error: an error object, or no answer before the connection closed; refused: by the gateway)',
      labelNames: ['node_id', 'api_key_id', 'outcome'],
      registers,
    }),
    websocketDuration: new Histogram<'node_id'>({
      name: 'rpc_gateway_websocket_call_duration_seconds',
      help: "Time from a WebSocket call's frame to the node's answer with its id, by node",
      labelNames: ['node_id'],
      buckets: RPC_DURATION_BUCKETS,
      registers,
    }),
    websocketConnections: new Counter<'node_id' | 'api_key_id'>({
      name: 'rpc_gateway_websocket_connections_total',
      help: "WebSocket connections opened to a node's endpoint, by node and API key",
      labelNames: ['node_id', 'api_key_id'],
      registers,
    }),
  }
}

export type GatewayMetrics = ReturnType<typeof createGatewayMetrics>
