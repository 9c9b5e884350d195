/**
 * Request validation with the route's own zod schemas: a failure is 400 whose details name each
 * offending field by where it came from (`query.limit`, `body.items[0].name`, `params.id`).
 */
import type { ZodIssue, ZodTypeAny, z } from 'zod'
import { ValidationError } from '../errors.js'

export type RequestPart = 'params' | 'query' | 'body'

/** At most this many issues are listed; one fix usually reveals the next. */
const MAX_ISSUES = 10

export function fieldPath(part: RequestPart, path: readonly (string | number)[]): string {
  return path.reduce<string>((text, segment) => (typeof segment === 'number' ? `${text}[${segment}]` : `${text}.${segment}`), part)
}

export function describeIssues(part: RequestPart, issues: readonly ZodIssue[]): string[] {
  return issues.map((issue) => `${fieldPath(part, issue.path)}: ${issue.message}`)
}

export interface ValidatedParts<P, Q, B> {
  params: P
  query: Q
  body: B
}

/** Validates every declared part and reports all their problems together. */
export function validateRequest<P extends ZodTypeAny | undefined, Q extends ZodTypeAny | undefined, B extends ZodTypeAny | undefined>(
  schemas: { params?: P; query?: Q; body?: B },
  input: { params: unknown; query: unknown; body: unknown },
): ValidatedParts<Output<P>, Output<Q>, Output<B>> {
  const problems: string[] = [
    ...unstorableText('params', input.params),
    ...unstorableText('query', input.query),
    ...unstorableText('body', input.body),
  ]
  const parse = <S extends ZodTypeAny | undefined>(part: RequestPart, schema: S, value: unknown): Output<S> => {
    if (!schema) return undefined as Output<S>
    const result = schema.safeParse(value)
    if (result.success) return result.data as Output<S>
    problems.push(...describeIssues(part, result.error.issues))
    return undefined as Output<S>
  }
  const validated = {
    params: parse('params', schemas.params, input.params),
    query: parse('query', schemas.query, input.query),
    body: parse('body', schemas.body, input.body),
  }
  if (problems.length > 0) {
    const listed = problems.slice(0, MAX_ISSUES)
    if (problems.length > MAX_ISSUES) listed.push(`(${problems.length - MAX_ISSUES} more)`)
    throw new ValidationError('invalid request', listed.join('; '))
  }
  return validated as ValidatedParts<Output<P>, Output<Q>, Output<B>>
}

/** A NUL character or a lone UTF-16 surrogate: no database column can store either as sent (Postgres refuses NUL outright). */
const UNSTORABLE = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/

/** Every string (or key) of a request part holding unstorable text, by field path; at most MAX_ISSUES. */
function unstorableText(part: RequestPart, value: unknown): string[] {
  const found: string[] = []
  const visit = (v: unknown, path: (string | number)[], depth: number): void => {
    if (found.length >= MAX_ISSUES || depth > 64) return
    if (typeof v === 'string') {
      if (UNSTORABLE.test(v)) found.push(`${fieldPath(part, path)}: must not contain NUL characters or unpaired UTF-16 surrogates`)
    } else if (Array.isArray(v)) {
      v.forEach((item, i) => visit(item, [...path, i], depth + 1))
    } else if (typeof v === 'object' && v !== null) {
      for (const [key, item] of Object.entries(v)) {
        if (UNSTORABLE.test(key)) found.push(`${fieldPath(part, path)}: a key must not contain NUL characters or unpaired UTF-16 surrogates`)
        else visit(item, [...path, key], depth + 1)
      }
    }
  }
  visit(value, [], 0)
  return found
}

export type Output<S> = S extends ZodTypeAny ? z.output<S> : undefined
