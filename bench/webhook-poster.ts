/**
 * The card processor's side of bench/payments-daemons.ts, in a process of its own so that the
 * bench's event loop never sends a webhook. Run with `node --import tsx` and an IPC channel;
 * argv[2] is the webhook URL. Each request on the channel is answered once every delivery in it
 * has an answer:
 *
 *   { deliveries: [{ payload, signature }], inFlight }
 *   -> { posts: [{ postedAt, answeredAt, status, outcome }] }
 *
 * Times are epoch milliseconds with sub-millisecond precision (timeOrigin + now), comparable
 * across processes.
 */
import type { WebhookPost, WebhookPostRequest } from './payments-daemons.js'

const url = process.argv[2] as string
const clock = (): number => performance.timeOrigin + performance.now()

async function post(delivery: { payload: string; signature: string }): Promise<WebhookPost> {
  const postedAt = clock()
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', 'Provider-Signature': delivery.signature }, body: delivery.payload })
  const body = (await res.json().catch(() => ({}))) as { outcome?: unknown }
  return { postedAt, answeredAt: clock(), status: res.status, outcome: String(body.outcome ?? '') }
}

process.on('message', (request: WebhookPostRequest) => {
  void (async () => {
    const posts: WebhookPost[] = new Array(request.deliveries.length)
    let next = 0
    const lane = async (): Promise<void> => {
      while (next < request.deliveries.length) {
        const i = next++
        posts[i] = await post(request.deliveries[i] as WebhookPostRequest['deliveries'][number])
      }
    }
    await Promise.all(Array.from({ length: Math.min(request.inFlight, request.deliveries.length) }, lane))
    process.send?.({ posts })
  })().catch((err: unknown) => {
    process.stderr.write(`webhook poster failed: ${String(err)}\n`)
    process.exit(1)
  })
})
process.on('disconnect', () => process.exit(0))
