import { describe, expect, it } from 'vitest'
import { outgoingTraceparent, parseTraceparent, traceContextFrom } from '../../../src/http/tracing.js'

const VALID = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'

describe('traceparent', () => {
  it('parses a version 00 header', () => {
    expect(parseTraceparent(VALID)).toEqual({ traceId: '4bf92f3577b34da6a3ce929d0e0e4736', parentSpanId: '00f067aa0ba902b7', sampled: true })
    expect(parseTraceparent(VALID.replace(/01$/, '00'))?.sampled).toBe(false)
  })

  it('accepts extra fields only from a later version', () => {
    expect(parseTraceparent(`${VALID.replace(/^00/, '01')}-extra`)?.traceId).toBe('4bf92f3577b34da6a3ce929d0e0e4736')
    expect(parseTraceparent(`${VALID}-extra`)).toBeUndefined()
  })

  it.each([
    ['version ff', VALID.replace(/^00/, 'ff')],
    ['all-zero trace id', '00-00000000000000000000000000000000-00f067aa0ba902b7-01'],
    ['all-zero parent id', '00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01'],
    ['uppercase hex', VALID.toUpperCase()],
    ['short trace id', '00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01'],
    ['garbage', 'hello'],
  ])('ignores %s', (_case, header) => {
    expect(parseTraceparent(header)).toBeUndefined()
  })

  it('continues an incoming trace with a new span of its own', () => {
    const trace = traceContextFrom(VALID, 'vendor=abc')
    expect(trace).toMatchObject({ traceId: '4bf92f3577b34da6a3ce929d0e0e4736', parentSpanId: '00f067aa0ba902b7', sampled: true, tracestate: 'vendor=abc' })
    expect(trace.spanId).toMatch(/^[0-9a-f]{16}$/)
    expect(trace.spanId).not.toBe('00f067aa0ba902b7')
    expect(outgoingTraceparent(trace)).toBe(`00-4bf92f3577b34da6a3ce929d0e0e4736-${trace.spanId}-01`)
  })

  it('starts a new trace without a valid header, and drops its tracestate', () => {
    const trace = traceContextFrom('nonsense', 'vendor=abc')
    expect(trace.traceId).toMatch(/^[0-9a-f]{32}$/)
    expect(trace).toMatchObject({ parentSpanId: undefined, sampled: false, tracestate: undefined })
    expect(traceContextFrom(undefined, undefined).traceId).not.toBe(trace.traceId)
  })
})
