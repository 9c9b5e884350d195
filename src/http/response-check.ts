/**
 * Response bodies are parsed through their declared zod schema before they are sent (route.ts):
 * undeclared fields are stripped and a body that does not match is a 500. zod's general parse
 * costs ~3 µs per object field with its contexts and result objects, which made the parse of a
 * 50-node page a sixth of the request's CPU (issue 21).
 *
 * `compileResponseCheck` walks a schema once and returns a function that, for the common kinds
 * (objects, arrays, strings with their checks, numbers, booleans, enums, literals, nullable,
 * optional), builds the same output zod would. It is only ever stricter than zod: whatever it
 * does not accept (a kind or check it does not know, a plain failure) is handed to the schema's
 * own parse, which either gives its output or throws its usual ZodError. So a body is accepted
 * exactly when zod accepts it, and the output sent is what zod would have produced.
 */
import { z, type ZodTypeAny } from 'zod'

/** Returned by a compiled check when it cannot vouch for a value; zod then decides. */
const UNSURE: unique symbol = Symbol('unsure')
type Check = (value: unknown) => unknown

// zod 3's own uuid pattern (not exported), so the fast path accepts exactly what `.uuid()` does.
const UUID = /^[0-9a-fA-F]{8}\b-[0-9a-fA-F]{4}\b-[0-9a-fA-F]{4}\b-[0-9a-fA-F]{4}\b-[0-9a-fA-F]{12}$/i

export function compileResponseCheck<S extends ZodTypeAny>(schema: S): (value: unknown) => z.output<S> {
  const check = compile(schema)
  return (value) => {
    const out = check(value)
    return (out === UNSURE ? schema.parse(value) : out) as z.output<S>
  }
}

function compile(schema: ZodTypeAny): Check {
  return compileKnown(schema) ?? viaZod(schema)
}

/** A part the fast path does not model: zod parses that part on its own. */
function viaZod(schema: ZodTypeAny): Check {
  return (value) => {
    const result = schema.safeParse(value)
    return result.success ? result.data : UNSURE
  }
}

function compileKnown(schema: ZodTypeAny): Check | undefined {
  if (schema instanceof z.ZodString) return compileString(schema)
  if (schema instanceof z.ZodNumber) return compileNumber(schema)
  if (schema instanceof z.ZodBoolean) {
    if (schema._def.coerce) return undefined
    return (value) => (typeof value === 'boolean' ? value : UNSURE)
  }
  if (schema instanceof z.ZodEnum) {
    const values = new Set<unknown>(schema._def.values as readonly string[])
    return (value) => (typeof value === 'string' && values.has(value) ? value : UNSURE)
  }
  if (schema instanceof z.ZodLiteral) {
    const literal: unknown = schema._def.value
    return (value) => (value === literal ? value : UNSURE)
  }
  if (schema instanceof z.ZodNullable) {
    const inner = compile(schema._def.innerType as ZodTypeAny)
    return (value) => (value === null ? null : inner(value))
  }
  if (schema instanceof z.ZodOptional) {
    const inner = compile(schema._def.innerType as ZodTypeAny)
    return (value) => (value === undefined ? undefined : inner(value))
  }
  if (schema instanceof z.ZodArray) return compileArray(schema)
  if (schema instanceof z.ZodObject) return compileObject(schema)
  if (schema instanceof z.ZodUnknown || schema instanceof z.ZodAny) return (value) => value
  return undefined
}

function compileString(schema: z.ZodString): Check | undefined {
  if (schema._def.coerce) return undefined
  const tests: Array<(s: string) => boolean> = []
  for (const check of schema._def.checks) {
    switch (check.kind) {
      case 'min':
        tests.push((s) => s.length >= check.value)
        break
      case 'max':
        tests.push((s) => s.length <= check.value)
        break
      case 'length':
        tests.push((s) => s.length === check.value)
        break
      case 'uuid':
        tests.push((s) => UUID.test(s))
        break
      case 'url':
        // zod's check is `new URL(s)` not throwing; canParse answers the same without the object.
        tests.push((s) => URL.canParse(s))
        break
      case 'regex': {
        const regex = check.regex
        tests.push((s) => {
          regex.lastIndex = 0
          return regex.test(s)
        })
        break
      }
      case 'startsWith':
        tests.push((s) => s.startsWith(check.value))
        break
      case 'endsWith':
        tests.push((s) => s.endsWith(check.value))
        break
      default:
        // Transforms (trim, toLowerCase) and the rarer formats: zod's own parse.
        return undefined
    }
  }
  return passing((value): value is string => typeof value === 'string', tests)
}

/** A check of the type, then of each test; the common counts get no loop. */
function passing<T>(isType: (value: unknown) => value is T, tests: Array<(value: T) => boolean>): Check {
  const [first, second] = tests
  if (first === undefined) return (value) => (isType(value) ? value : UNSURE)
  if (second === undefined) return (value) => (isType(value) && first(value) ? value : UNSURE)
  return (value) => {
    if (!isType(value)) return UNSURE
    for (const test of tests) if (!test(value)) return UNSURE
    return value
  }
}

function compileNumber(schema: z.ZodNumber): Check | undefined {
  if (schema._def.coerce) return undefined
  const tests: Array<(n: number) => boolean> = []
  for (const check of schema._def.checks) {
    switch (check.kind) {
      case 'int':
        tests.push((n) => Number.isInteger(n))
        break
      case 'min':
        tests.push(check.inclusive ? (n) => n >= check.value : (n) => n > check.value)
        break
      case 'max':
        tests.push(check.inclusive ? (n) => n <= check.value : (n) => n < check.value)
        break
      case 'finite':
        tests.push((n) => Number.isFinite(n))
        break
      default:
        return undefined
    }
  }
  return passing((value): value is number => typeof value === 'number' && !Number.isNaN(value), tests)
}

function compileArray(schema: z.ZodArray<ZodTypeAny>): Check {
  const item = compile(schema._def.type)
  const { minLength, maxLength, exactLength } = schema._def
  return (value) => {
    if (!Array.isArray(value)) return UNSURE
    if (minLength && value.length < minLength.value) return UNSURE
    if (maxLength && value.length > maxLength.value) return UNSURE
    if (exactLength && value.length !== exactLength.value) return UNSURE
    const out = new Array<unknown>(value.length)
    for (let i = 0; i < value.length; i++) {
      const parsed = item(value[i])
      if (parsed === UNSURE) return UNSURE
      out[i] = parsed
    }
    return out
  }
}

function compileObject(schema: z.AnyZodObject): Check | undefined {
  const { unknownKeys, catchall } = schema._def
  if (!(catchall instanceof z.ZodNever) || (unknownKeys !== 'strip' && unknownKeys !== 'strict')) return undefined
  const strict = unknownKeys === 'strict'
  const keys = Object.keys(schema.shape as Record<string, ZodTypeAny>)
  const checks = keys.map((key) => compile((schema.shape as Record<string, ZodTypeAny>)[key]!))
  const known = new Set(keys)
  return (value) => {
    // Plain objects only (zod also takes class instances; those go to zod).
    if (typeof value !== 'object' || value === null) return UNSURE
    const proto = Object.getPrototypeOf(value) as unknown
    if (proto !== Object.prototype && proto !== null) return UNSURE
    const input = value as Record<string, unknown>
    if (strict) for (const key in input) if (!known.has(key)) return UNSURE
    const out: Record<string, unknown> = {}
    for (let i = 0; i < keys.length; i++) {
      const key = keys[i]!
      const parsed = checks[i]!(input[key])
      if (parsed === UNSURE) return UNSURE
      // As zod: a key is written when its output is defined or the input had it.
      if (key !== '__proto__' && (parsed !== undefined || key in input)) out[key] = parsed
    }
    return out
  }
}
