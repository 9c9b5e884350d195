/** Flags shared by the commands that create API keys (`api-key issue`, `api-key create`). */
import * as Flags from '@oclif/core/flags'
import { parseDuration } from '../config/duration.js'
import { ValidationError } from '../errors.js'

export const keyFlags = {
  name: Flags.string({ description: 'a name to recognise the key by (at most 100 characters)', required: true }),
  scopes: Flags.string({
    description: 'comma-separated scopes: nodes:read, nodes:write, nodes:rpc, subscriptions:read, subscriptions:write, chains:read, keys:export, payments:read, payments:write, api-keys:manage, or *',
    required: true,
  }),
  'expires-in': Flags.string({ description: 'lifetime such as 12h, 30d (at least 1h); default: never expires' }),
}

/** `nodes:read, chains:read` -> ['nodes:read', 'chains:read']; validity is checked by the key rules. */
export function parseScopes(text: string): string[] {
  const scopes = [...new Set(text.split(',').map((s) => s.trim()).filter((s) => s.length > 0))]
  if (scopes.length === 0) throw new ValidationError('--scopes: at least one scope is required', 'e.g. --scopes nodes:read,chains:read')
  return scopes
}

export function parseExpiresIn(text: string | undefined, now: Date = new Date()): Date | null {
  if (text === undefined) return null
  const ms = parseDuration(text)
  if (ms === null || ms <= 0) throw new ValidationError(`--expires-in: "${text.slice(0, 40)}" is not a duration such as 12h or 30d`)
  return new Date(now.getTime() + ms)
}
