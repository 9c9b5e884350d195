/**
 * A customer's client polling a node's endpoint: one JSON-RPC call at a time, the next 100 ms
 * after the last answer, every answer kept with the time it was sent (issue 18: "a client polling
 * every 100 ms sees only the migration window fail"). Stop it in a `finally`.
 */
export interface PolledAnswer {
  sentAt: number
  status: number
  /** The call's `result`, or undefined for a failure. */
  result?: unknown
  /** The JSON-RPC error of a failure (undefined if the body was not one). */
  error?: { code: number; message: string }
}

export interface EndpointPoller {
  readonly answers: readonly PolledAnswer[]
  stop(): Promise<void>
}

export function pollEndpoint(url: string, method: string, intervalMs = 100): EndpointPoller {
  const answers: PolledAnswer[] = []
  let stopped = false
  let wake: (() => void) | undefined
  const loop = (async () => {
    while (!stopped) {
      const sentAt = Date.now()
      try {
        const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ jsonrpc: '2.0', id: answers.length, method, params: [] }) })
        const body = (await response.json().catch(() => undefined)) as { result?: unknown; error?: { code: number; message: string } } | undefined
        answers.push({ sentAt, status: response.status, result: response.ok && body && 'result' in body ? body.result : undefined, error: body?.error })
      } catch {
        answers.push({ sentAt, status: 0 })
      }
      await new Promise<void>((resolve) => {
        wake = resolve
        setTimeout(resolve, intervalMs)
      })
    }
  })()
  return {
    answers,
    async stop() {
      stopped = true
      wake?.()
      await loop
    },
  }
}
