/**
 * A node's customer endpoints (docs/rpc-gateway.md, "URLs"): `{RPC_PUBLIC_URL}/v1/{node_id}` for
 * HTTP and the same path on ws(s):// for WebSocket clients.
 */
export interface NodeEndpoints {
  http: string
  ws: string
}

export function nodeEndpoints(publicUrl: string, nodeId: string): NodeEndpoints {
  const base = publicUrl.replace(/\/+$/, '')
  const http = `${base}/v1/${nodeId}`
  return { http, ws: http.replace(/^http/, 'ws') }
}

/** RPC_PUBLIC_URL, or the gateway on this machine at RPC_GATEWAY_PORT. */
export function rpcPublicUrl(settings: { RPC_PUBLIC_URL?: string | undefined; RPC_GATEWAY_PORT?: number | undefined }): string {
  return settings.RPC_PUBLIC_URL ?? `http://127.0.0.1:${settings.RPC_GATEWAY_PORT ?? 8545}`
}
