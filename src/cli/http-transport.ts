/**
 * The CLI's HTTP transport: one request over node:http or node:https, never following a
 * redirect. Not the global fetch: loading undici (fetch's engine, with its WebAssembly parser)
 * cost about 0.12 s of CPU per CLI call, against 0.03 s for node:http, and a CLI call makes one
 * or two requests.
 */
import type { IncomingHttpHeaders } from 'node:http'

export interface TransportInit {
  method: string
  headers: Record<string, string>
  body?: string | undefined
  signal?: AbortSignal | undefined
}

/** What the API client reads of an answer; a fetch Response has the same shape. */
export interface TransportResponse {
  status: number
  ok: boolean
  headers: { get(name: string): string | null }
  text(): Promise<string>
}

export type Transport = (url: URL, init: TransportInit) => Promise<TransportResponse>

export const httpTransport: Transport = async (url, init) => {
  const { request } = url.protocol === 'https:' ? await import('node:https') : await import('node:http')
  return new Promise<TransportResponse>((resolve, reject) => {
    const req = request(url, { method: init.method, headers: init.headers, signal: init.signal }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (chunk: Buffer) => chunks.push(chunk))
      res.on('error', reject)
      res.on('end', () => {
        const status = res.statusCode ?? 0
        const text = Buffer.concat(chunks).toString('utf8')
        resolve({ status, ok: status >= 200 && status < 300, headers: headerReader(res.headers), text: () => Promise.resolve(text) })
      })
    })
    // An abort from AbortSignal.timeout() reaches here as the signal's reason, a TimeoutError.
    req.on('error', (err) => reject(init.signal?.aborted ? init.signal.reason : new Error(err.message, { cause: err })))
    req.end(init.body)
  })
}

function headerReader(headers: IncomingHttpHeaders): TransportResponse['headers'] {
  return {
    get(name) {
      const value = headers[name.toLowerCase()]
      if (value === undefined) return null
      return Array.isArray(value) ? value.join(', ') : value
    },
  }
}
