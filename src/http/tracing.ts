/**
 * Tracing, second in the chain: W3C Trace Context (https://www.w3.org/TR/trace-context/).
 * An incoming `traceparent` is continued (same trace id, this request becomes a child span);
 * without one, or with a malformed one, a new trace starts, as a tracing SDK would do. The ids
 * go on every log line of the request (`traceId`, `spanId`), and `outgoingTraceparent` is what a
 * call this request makes to another service (payment-service gRPC, NATS headers) should carry.
 *
 * No spans are exported yet; an OpenTelemetry SDK can replace `traceContextFrom` later without
 * touching the rest of the chain.
 */
import crypto from 'node:crypto'
import type { ApiMiddleware } from './context.js'

export interface TraceContext {
  /** 32 lowercase hex characters. */
  traceId: string
  /** This request's span id, 16 lowercase hex characters. */
  spanId: string
  /** The caller's span id, when the request continued an incoming trace. */
  parentSpanId: string | undefined
  sampled: boolean
  /** Vendor state from the caller's `tracestate`, passed on unchanged. */
  tracestate: string | undefined
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/
const ALL_ZERO = /^0+$/
const MAX_TRACESTATE_LENGTH = 512

export interface ParsedTraceparent {
  traceId: string
  parentSpanId: string
  sampled: boolean
}

/** Parses a `traceparent` header per the spec's rules; undefined when it must be ignored. */
export function parseTraceparent(header: string | undefined): ParsedTraceparent | undefined {
  if (header === undefined) return undefined
  const match = TRACEPARENT.exec(header.trim())
  if (!match) return undefined
  const [, version, traceId, parentSpanId, flags, rest] = match as unknown as [string, string, string, string, string, string | undefined]
  if (version === 'ff') return undefined
  // Version 00 has exactly four fields; a later version may append more, which we ignore.
  if (version === '00' && rest !== undefined) return undefined
  if (ALL_ZERO.test(traceId) || ALL_ZERO.test(parentSpanId)) return undefined
  return { traceId, parentSpanId, sampled: (Number.parseInt(flags, 16) & 1) === 1 }
}

export function traceContextFrom(traceparent: string | undefined, tracestate: string | undefined): TraceContext {
  const parent = parseTraceparent(traceparent)
  const spanId = randomHex(8)
  if (!parent) {
    return { traceId: randomHex(16), spanId, parentSpanId: undefined, sampled: false, tracestate: undefined }
  }
  const state = tracestate !== undefined && tracestate.length <= MAX_TRACESTATE_LENGTH ? tracestate : undefined
  return { traceId: parent.traceId, spanId, parentSpanId: parent.parentSpanId, sampled: parent.sampled, tracestate: state }
}

/** The `traceparent` to send on a call made on behalf of this request. */
export function outgoingTraceparent(trace: TraceContext): string {
  return `00-${trace.traceId}-${trace.spanId}-${trace.sampled ? '01' : '00'}`
}

export function tracing(): ApiMiddleware {
  return async (ctx, next) => {
    ctx.state.trace = traceContextFrom(headerValue(ctx.req.headers.traceparent), headerValue(ctx.req.headers.tracestate))
    await next()
  }
}

function headerValue(value: string | string[] | undefined): string | undefined {
  // A repeated traceparent is invalid (the spec allows one); tracestate may be split.
  if (Array.isArray(value)) return undefined
  return value
}

/**
 * Random bytes are taken from a pool filled 4 KiB at a time, each byte handed out once: a
 * `randomBytes` call per id cost about 7% of the CPU of an authenticated request under load.
 */
const RANDOM_POOL_BYTES = 4096
let randomPool = Buffer.alloc(0)
let randomOffset = 0

function randomHex(bytes: number): string {
  for (;;) {
    if (randomOffset + bytes > randomPool.length) {
      randomPool = crypto.randomFillSync(Buffer.allocUnsafe(RANDOM_POOL_BYTES))
      randomOffset = 0
    }
    const hex = randomPool.toString('hex', randomOffset, randomOffset + bytes)
    randomOffset += bytes
    if (!ALL_ZERO.test(hex)) return hex
  }
}
