import { describe, expect, it } from 'vitest'
import { AuthenticationError, credentialOf } from '../../../src/auth/authenticator.js'

const KEY = `np_${'a'.repeat(43)}`

function refused(headers: Record<string, string | string[] | undefined>): AuthenticationError {
  try {
    credentialOf(headers)
  } catch (err) {
    expect(err).toBeInstanceOf(AuthenticationError)
    return err as AuthenticationError
  }
  throw new Error('expected a refusal')
}

describe('credentialOf', () => {
  it('reads a bearer API key, a bearer JWT and X-API-Key', () => {
    expect(credentialOf({ authorization: `Bearer ${KEY}` })).toEqual({ kind: 'api_key', value: KEY })
    expect(credentialOf({ authorization: `bearer   ${KEY} ` })).toEqual({ kind: 'api_key', value: KEY })
    expect(credentialOf({ authorization: 'Bearer eyJa.eyJb.c' })).toEqual({ kind: 'jwt', value: 'eyJa.eyJb.c' })
    expect(credentialOf({ 'x-api-key': ` ${KEY} ` })).toEqual({ kind: 'api_key', value: KEY })
    expect(credentialOf({ authorization: `Bearer ${KEY}`, 'x-api-key': KEY })).toEqual({ kind: 'api_key', value: KEY })
  })

  it('answers a missing credential with a bare challenge and a garbled one with invalid_token', () => {
    const missing = refused({})
    expect(missing.status).toBe(401)
    expect(missing.headers['WWW-Authenticate']).toBe('Bearer realm="nodeplane"')
    for (const headers of [
      { authorization: 'Basic dXNlcjpwYXNz' },
      { authorization: 'Bearer' },
      { authorization: 'Bearer a b' },
      { 'x-api-key': 'eyJa.eyJb.c' },
      { authorization: `Bearer ${KEY}`, 'x-api-key': `np_${'b'.repeat(43)}` },
      { 'x-api-key': [KEY, KEY] },
      { authorization: `Bearer ${'x'.repeat(9000)}` },
    ]) {
      const err = refused(headers)
      expect(err.headers['WWW-Authenticate']).toBe('Bearer realm="nodeplane", error="invalid_token"')
      // The credential is never quoted back.
      expect(`${err.message} ${err.details}`).not.toContain('dXNlcjpwYXNz')
      expect(`${err.message} ${err.details}`).not.toContain('aaaaaaaa')
    }
  })
})
