/**
 * Subject rules shared by the outbox, both bus adapters and consumers. NATS subjects are
 * dot-separated tokens; `*` matches one token and `>` the rest (one or more tokens), and only
 * in filters. A published subject must be concrete and held by one of our streams, otherwise
 * JetStream has nowhere to store it and the relay would retry it forever.
 */
import { ValidationError } from '../errors.js'
import { STREAMS } from './bus.js'

export type StreamName = (typeof STREAMS)[number]['name']

const MAX_SUBJECT_LENGTH = 255

function tokens(subject: string): string[] {
  return subject.split('.')
}

function badSubjectReason(subject: string, allowWildcards: boolean): string | null {
  if (subject.length === 0) return 'is empty'
  if (subject.length > MAX_SUBJECT_LENGTH) return `is longer than ${MAX_SUBJECT_LENGTH} characters`
  if (/\s/.test(subject)) return 'contains whitespace'
  const parts = tokens(subject)
  for (const [i, token] of parts.entries()) {
    if (token.length === 0) return 'has an empty token (leading, trailing or double dot)'
    if (token === '*' || token === '>') {
      if (!allowWildcards) return 'contains a wildcard (* or >); publish on a concrete subject'
      if (token === '>' && i !== parts.length - 1) return 'has > before the last token'
    } else if (token.includes('*') || token.includes('>')) {
      return 'has a wildcard inside a token'
    }
  }
  return null
}

/**
 * True when every subject matched by `filter` is also matched by `pattern`. With a concrete
 * `filter` this is plain subject matching (a message subject against a subscription filter).
 */
export function subjectWithin(filter: string, pattern: string): boolean {
  const f = tokens(filter)
  const p = tokens(pattern)
  for (let i = 0; i < p.length; i++) {
    const pt = p[i]
    const ft = f[i]
    if (pt === '>') return ft !== undefined
    if (ft === undefined) return false
    if (pt === '*') {
      if (ft === '>') return false
      continue
    }
    if (ft !== pt) return false
  }
  return f.length === p.length
}

/** The stream that stores a concrete subject, or undefined when none does. */
export function streamForSubject(subject: string): StreamName | undefined {
  return STREAMS.find((s) => s.subjects.some((pattern) => subjectWithin(subject, pattern)))?.name
}

/** Throws ValidationError unless `subject` is concrete and held by one of STREAMS. */
export function assertPublishableSubject(subject: string): void {
  const reason = badSubjectReason(subject, false)
  if (reason) throw new ValidationError(`invalid event subject "${subject}": ${reason}`)
  if (!streamForSubject(subject)) {
    const held = STREAMS.flatMap((s) => s.subjects).join(', ')
    throw new ValidationError(`no stream holds subject "${subject}"`, `event subjects must match one of: ${held}`)
  }
}

/**
 * The stream a subscription filter reads from: every subject it can match must belong to that
 * one stream (a JetStream consumer lives on exactly one stream).
 */
export function streamForFilter(filter: string): StreamName {
  const reason = badSubjectReason(filter, true)
  if (reason) throw new ValidationError(`invalid subject filter "${filter}": ${reason}`)
  const stream = STREAMS.find((s) => s.subjects.some((pattern) => subjectWithin(filter, pattern)))
  if (!stream) {
    const held = STREAMS.map((s) => `${s.name} (${s.subjects.join(', ')})`).join('; ')
    throw new ValidationError(`subject filter "${filter}" does not fall within one stream`, `streams: ${held}`)
  }
  return stream.name
}
