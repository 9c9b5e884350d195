import { describe, expect, it } from 'vitest'
import { ValidationError } from '../../../src/errors.js'
import { openEnvelope } from '../../../src/events/envelope.js'
import type { BusMessage } from '../../../src/events/bus.js'
import { assertPublishableSubject, streamForFilter, streamForSubject, subjectWithin } from '../../../src/events/subjects.js'

describe('subjects', () => {
  it('maps the spec subjects to their streams', () => {
    expect(streamForSubject('payment.completed')).toBe('PAYMENTS')
    expect(streamForSubject('events.rollout.r1.started')).toBe('EVENTS')
    expect(streamForSubject('events.node.n1.upgrade_phase_changed')).toBe('EVENTS')
    expect(streamForSubject('payment.completed.extra')).toBeUndefined()
    expect(streamForSubject('orders.created')).toBeUndefined()
  })

  it('refuses subjects that cannot be published', () => {
    for (const bad of ['', 'payment.*', 'events.>', 'payment. completed', 'payment..completed', 'payment.completed.', 'orders.created', 'pay*ment.x']) {
      expect(() => assertPublishableSubject(bad), bad).toThrow(ValidationError)
    }
    expect(() => assertPublishableSubject('payment.failed')).not.toThrow()
  })

  it('finds the stream of a subscription filter only when it lies within one stream', () => {
    expect(streamForFilter('payment.*')).toBe('PAYMENTS')
    expect(streamForFilter('payment.completed')).toBe('PAYMENTS')
    expect(streamForFilter('events.>')).toBe('EVENTS')
    expect(streamForFilter('events.node.*.upgrade_started')).toBe('EVENTS')
    expect(() => streamForFilter('>')).toThrow(ValidationError)
    expect(() => streamForFilter('payment.>')).toThrow(ValidationError)
    expect(() => streamForFilter('events.>.x')).toThrow(ValidationError)
  })

  it('matches filters the way NATS does', () => {
    expect(subjectWithin('events.node.n1.x', 'events.>')).toBe(true)
    expect(subjectWithin('events', 'events.>')).toBe(false)
    expect(subjectWithin('events.node.n1.x', 'events.node.*.x')).toBe(true)
    expect(subjectWithin('events.node.n1.y', 'events.node.*.x')).toBe(false)
    expect(subjectWithin('payment.*', 'payment.*')).toBe(true)
    expect(subjectWithin('payment.>', 'payment.*')).toBe(false)
  })
})

function message(data: string, messageId?: string): BusMessage {
  return {
    subject: 'payment.completed',
    data: new TextEncoder().encode(data),
    messageId,
    headers: {},
    deliveryCount: 1,
    ack: () => undefined,
    nak: () => undefined,
    term: () => undefined,
  }
}

describe('envelope', () => {
  it('takes the idempotency key from the message id, else from the payload', () => {
    const a = openEnvelope(message('{"idempotency_key":"k1","x":1}', 'm-1'))
    expect(a.ok && a.envelope.idempotencyKey).toBe('m-1')
    const b = openEnvelope(message('{"idempotency_key":"k1","x":1}'))
    expect(b.ok && b.envelope.idempotencyKey).toBe('k1')
  })

  it('calls a message malformed when it can never be understood', () => {
    expect(openEnvelope(message('not json', 'm-1')).ok).toBe(false)
    expect(openEnvelope(message('[1,2]', 'm-1')).ok).toBe(false)
    expect(openEnvelope(message('"text"', 'm-1')).ok).toBe(false)
    expect(openEnvelope(message('{"x":1}')).ok).toBe(false)
    expect(openEnvelope(message(`{"idempotency_key":"${'k'.repeat(181)}"}`)).ok).toBe(false)
  })
})
