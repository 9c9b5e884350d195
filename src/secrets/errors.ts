import { DomainError } from '../errors.js'

/**
 * Stored key material that does not decrypt: wrapped by another master key, moved to another row,
 * or altered. Never the caller's fault, so a 500 (logged, not explained to the client). The
 * message names what failed (a node id, a key name, a key id), never any key bytes.
 */
export class KeyMaterialError extends DomainError {
  readonly status = 500
  readonly code = 'key_material_unreadable'
}
