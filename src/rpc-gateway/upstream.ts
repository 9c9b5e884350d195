/**
 * One HTTP POST to a node's RPC, on keep-alive connections (one pool per gateway). Errors are
 * told apart by what the gateway answers: the address refused or dropped the connection
 * (`unreachable`: the route may be stale) or it did not answer in time (`timeout`).
 */
import http from 'node:http'

export class UpstreamError extends Error {
  constructor(
    readonly kind: 'unreachable' | 'timeout',
    message: string,
  ) {
    super(message)
  }
}

export interface UpstreamResponse {
  status: number
  contentType: string | undefined
  body: Buffer
}

/** Bounded: a node cannot make the gateway buffer an unbounded answer. */
export const MAX_UPSTREAM_RESPONSE_BYTES = 64 * 1024 * 1024

export function createUpstreamClient(options: { timeoutMs: number; maxSockets?: number }) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: options.maxSockets ?? 256, keepAliveMsecs: 1_000 })

  function post(url: string, body: Buffer, authorization: string | undefined): Promise<UpstreamResponse> {
    return new Promise((resolve, reject) => {
      const headers: http.OutgoingHttpHeaders = { 'content-type': 'application/json', 'content-length': body.length }
      if (authorization) headers.authorization = authorization
      const req = http.request(url, { method: 'POST', agent, headers, timeout: options.timeoutMs }, (res) => {
        const chunks: Buffer[] = []
        let size = 0
        res.on('data', (chunk: Buffer) => {
          size += chunk.length
          if (size > MAX_UPSTREAM_RESPONSE_BYTES) {
            req.destroy(new UpstreamError('unreachable', `the node's answer is larger than ${MAX_UPSTREAM_RESPONSE_BYTES} bytes`))
            return
          }
          chunks.push(chunk)
        })
        res.on('end', () => resolve({ status: res.statusCode ?? 502, contentType: res.headers['content-type'], body: Buffer.concat(chunks) }))
        res.on('error', (err) => reject(err instanceof UpstreamError ? err : new UpstreamError('unreachable', err.message)))
      })
      req.on('timeout', () => req.destroy(new UpstreamError('timeout', `no answer within ${options.timeoutMs} ms`)))
      req.on('error', (err) => reject(err instanceof UpstreamError ? err : new UpstreamError('unreachable', (err as NodeJS.ErrnoException).code ?? err.message)))
      req.end(body)
    })
  }

  return {
    post,
    close(): void {
      agent.destroy()
    },
  }
}

export type UpstreamClient = ReturnType<typeof createUpstreamClient>
