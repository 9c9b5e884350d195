import { afterEach, describe, expect, it, vi } from 'vitest'
import { compileResponseCheck } from '../../../src/http/response-check.js'
import { z } from '../../../src/http/zod.js'

const node = z
  .object({
    id: z.string().uuid(),
    name: z.string().min(1).max(20),
    state: z.enum(['running', 'stopped']),
    kind: z.literal('node'),
    count: z.number().int().min(0),
    ratio: z.number().max(1, { message: 'too big' }),
    ready: z.boolean(),
    version: z.string().nullable(),
    note: z.string().optional(),
    url: z.string().url(),
    code: z.string().regex(/^[a-z]+$/g),
    tags: z.array(z.string()).max(3),
    endpoints: z.object({ http: z.string().url() }).openapi({ description: 'nested' }),
    // Kinds the fast path leaves to zod.
    lower: z.string().toLowerCase(),
    when: z.coerce.number(),
    either: z.union([z.string(), z.number()]),
  })
  .openapi('TestNode')
const page = z.object({ items: z.array(node), next_cursor: z.string().nullable() })

const good = {
  id: '0190c3a2-7c1e-7cc0-9c6e-2f6f0d5c1a11',
  name: 'a',
  state: 'running',
  kind: 'node',
  count: 3,
  ratio: 0.5,
  ready: true,
  version: null,
  url: 'https://rpc.example.com/v1/x',
  code: 'abc',
  tags: ['x'],
  endpoints: { http: 'https://rpc.example.com/v1/y', secret: 'dropped' },
  lower: 'MiXeD',
  when: '12',
  either: 4,
  key_hash: 'never sent',
}

/** What zod answers: its output, or its error's issues. */
function viaZod(schema: z.ZodTypeAny, value: unknown): unknown {
  const result = schema.safeParse(value)
  return result.success ? { output: result.data } : { issues: result.error.issues }
}

function viaCheck(schema: z.ZodTypeAny, value: unknown): unknown {
  const check = compileResponseCheck(schema)
  try {
    return { output: check(value) }
  } catch (err) {
    return { issues: (err as z.ZodError).issues }
  }
}

describe('compileResponseCheck', () => {
  const cases: Array<[string, unknown]> = [
    ['a valid body, undeclared fields present', good],
    ['an optional field given', { ...good, note: 'hi' }],
    ['an optional field explicitly undefined', { ...good, note: undefined }],
    ['a bad uuid', { ...good, id: 'not-a-uuid' }],
    ['a bad url', { ...good, url: 'not a url' }],
    ['a bad nested url', { ...good, endpoints: { http: '::' } }],
    ['an unknown enum value', { ...good, state: 'gone' }],
    ['a wrong literal', { ...good, kind: 'host' }],
    ['a non-integer count', { ...good, count: 1.5 }],
    ['NaN', { ...good, ratio: Number.NaN }],
    ['a number over its max', { ...good, ratio: 2 }],
    ['a string too long', { ...good, name: 'x'.repeat(21) }],
    ['an empty string under its min', { ...good, name: '' }],
    ['a global regex twice in a row', { ...good, code: 'abcd' }],
    ['a regex mismatch', { ...good, code: 'ABC' }],
    ['too many array items', { ...good, tags: ['a', 'b', 'c', 'd'] }],
    ['a missing required field', { ...good, ready: undefined }],
    ['null where not nullable', { ...good, name: null }],
    ['a Date where a string is declared', { ...good, version: new Date(0) }],
    ['an array where an object is declared', [good]],
    ['a class instance as the object', Object.assign(new (class Row {})(), good)],
    ['a transform zod applies', { ...good, lower: 'ABC' }],
    ['a failure in a part zod parses', { ...good, when: 'x' }],
  ]
  for (const [name, value] of cases) {
    it(`answers as zod for ${name}`, () => {
      expect(viaCheck(node, value)).toEqual(viaZod(node, value))
    })
  }

  it('answers a page as zod does, key order included, stripping what is not declared', () => {
    const body = { items: [good, { ...good, note: 'n' }], next_cursor: null, total: 2 }
    const output = compileResponseCheck(page)(body)
    expect(output).toEqual(page.parse(body))
    expect(JSON.stringify(output)).toBe(JSON.stringify(page.parse(body)))
    expect(JSON.stringify(output)).not.toContain('key_hash')
    expect(JSON.stringify(output)).not.toContain('dropped')
  })

  describe('without zod where it models every part', () => {
    afterEach(() => vi.restoreAllMocks())
    const modelled = z.object({ id: z.string().uuid(), name: z.string().min(1), state: z.enum(['running', 'stopped']), count: z.number().int(), tags: z.array(z.string()), note: z.string().nullable() })
    const body = { id: good.id, name: 'a', state: 'running', count: 1, tags: ['x'], note: null, extra: true }

    // zod binds parse and safeParse to each schema in its constructor: spy on every part.
    const parts = (): z.ZodTypeAny[] => [modelled, ...Object.values(modelled.shape), modelled.shape.tags.element, modelled.shape.note.unwrap()]
    const spies = () => parts().flatMap((part) => [vi.spyOn(part, 'parse'), vi.spyOn(part, 'safeParse')])

    it('builds the output of a valid body itself, without a zod parse', () => {
      const check = compileResponseCheck(modelled)
      const calls = spies()
      expect(check(body)).toEqual({ id: good.id, name: 'a', state: 'running', count: 1, tags: ['x'], note: null })
      for (const spy of calls) expect(spy).not.toHaveBeenCalled()
    })

    it('hands an invalid body to zod, whose error it throws', () => {
      const check = compileResponseCheck(modelled)
      const calls = spies()
      expect(() => check({ ...body, count: 1.5 })).toThrow(z.ZodError)
      expect(calls.some((spy) => spy.mock.calls.length > 0)).toBe(true)
    })
  })

  it('refuses a strict object with an extra key, as zod does', () => {
    const strict = z.object({ a: z.string() }).strict()
    expect(viaCheck(strict, { a: 'x', b: 1 })).toEqual(viaZod(strict, { a: 'x', b: 1 }))
    expect(viaCheck(strict, { a: 'x' })).toEqual({ output: { a: 'x' } })
  })
})
