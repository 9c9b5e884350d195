/**
 * Provisioning input specs (spec: "Provisioning input spec (declared per chain)") and the
 * conversion of a chain config's legacy `keys: [name, ...]` list into them (spec: "A legacy
 * `keys` list in chain config is converted to `type: secret, source: generated`").
 */
import { ConfigError } from '../errors.js'
import { MAX_KEY_NAME_LENGTH, type GeneratableKeyType, type KeySource } from './node-key-types.js'

export const INPUT_TYPES = ['text', 'proof', 'secret'] as const
export type InputType = (typeof INPUT_TYPES)[number]
export const INPUT_PHASES = ['pre_provision'] as const
export type InputPhase = (typeof INPUT_PHASES)[number]

export interface InputSpec {
  name: string
  type: InputType
  required: boolean
  /** Regular expression applied to user input (text and proof). */
  validation?: string
  phase: InputPhase
  /** Secrets only. */
  source?: KeySource
  /** Secrets only, e.g. `ed25519`. */
  key_type?: string
}

/** The type legacy keys are generated as, unless the chain says otherwise. */
export const DEFAULT_LEGACY_KEY_TYPE: GeneratableKeyType = 'ed25519'

const LEGACY_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]*$/

/**
 * `keys: [name, ...]` -> one generated secret input per name, after the declared inputs. A
 * generated key asks nothing of the user, so it is not `required` input. Throws ConfigError
 * naming the chain when a name is malformed, repeated, or already a declared input.
 */
export function legacyKeysToInputSpecs(
  chain: string,
  keys: readonly string[],
  declared: readonly InputSpec[] = [],
  keyType: GeneratableKeyType = DEFAULT_LEGACY_KEY_TYPE,
): InputSpec[] {
  const problems: string[] = []
  const taken = new Set(declared.map((input) => input.name))
  const converted: InputSpec[] = []
  keys.forEach((name, i) => {
    if (name.length === 0 || name.length > MAX_KEY_NAME_LENGTH || !LEGACY_NAME.test(name)) {
      problems.push(`chain ${chain}: keys[${i}] "${name.slice(0, 40)}" must be 1 to ${MAX_KEY_NAME_LENGTH} letters, digits, ".", "_" or "-"`)
      return
    }
    if (taken.has(name)) {
      problems.push(`chain ${chain}: keys[${i}] "${name}" is already declared ${declared.some((d) => d.name === name) ? 'as an input' : 'earlier in keys'}`)
      return
    }
    taken.add(name)
    converted.push({ name, type: 'secret', required: false, phase: 'pre_provision', source: 'generated', key_type: keyType })
  })
  if (problems.length > 0) throw new ConfigError(problems)
  return [...declared, ...converted]
}
