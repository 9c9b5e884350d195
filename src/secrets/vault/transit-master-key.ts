/**
 * The master key held by Vault's transit engine (docs/secrets.md): `wrap` is
 * `POST <mount>/encrypt/<key>`, `unwrap` is `POST <mount>/decrypt/<key>`. The key never leaves
 * Vault; the stored text is Vault's own `vault:v<n>:…` ciphertext, which names the key version,
 * so rotating the transit key in Vault needs nothing from nodeplane (older versions still decrypt).
 */
import { ConfigError, UnavailableError } from '../../errors.js'
import { KeyMaterialError } from '../errors.js'
import type { MasterKey } from '../master-key.js'
import { VaultRefusedError, VaultRequestError, VaultUnreachableError, type TransitRewrapResult, type VaultClient } from './client.js'

export class VaultTransitMasterKey implements MasterKey {
  /** `vault-transit:<mount>/<key>`: stable across restarts and key versions, the same on every server. */
  readonly id: string

  constructor(
    private readonly vault: VaultClient,
    readonly mount: string,
    readonly keyName: string,
  ) {
    this.id = `vault-transit:${mount}/${keyName}`
  }

  async wrap(plaintext: Uint8Array): Promise<string> {
    try {
      return await this.vault.transitEncrypt(this.mount, this.keyName, plaintext)
    } catch (err) {
      throw unavailable(err, 'wrapped')
    }
  }

  async unwrap(wrapped: string): Promise<Uint8Array> {
    if (!/^vault:v\d+:/.test(wrapped)) {
      throw new KeyMaterialError('cannot unwrap key material', 'not a Vault transit ciphertext (wrapped by the local master key file? every server sharing a database needs the same SECRETS_PROVIDER)')
    }
    try {
      return await this.vault.transitDecrypt(this.mount, this.keyName, wrapped)
    } catch (err) {
      if (err instanceof VaultRequestError && err.status === 400) {
        throw new KeyMaterialError('cannot unwrap key material', `Vault transit key ${this.mount}/${this.keyName} does not decrypt it (altered, or wrapped by another key)`)
      }
      throw unavailable(err, 'unwrapped')
    }
  }

  /** Each value re-encrypted under the transit key's latest version (docs/secrets.md, "Rotating the master key"). */
  async rewrap(wrapped: readonly string[]): Promise<TransitRewrapResult[]> {
    try {
      return await this.vault.transitRewrap(this.mount, this.keyName, wrapped)
    } catch (err) {
      // Only an operator command rewraps: a policy without `rewrap` is its configuration to fix, not a retry.
      if (err instanceof VaultRequestError && err.status === 403) {
        throw new ConfigError([`VAULT_TRANSIT_KEY: ${err.message}: the policy must grant "update" on ${this.mount}/rewrap/${this.keyName}`])
      }
      throw unavailable(err, 'rewrapped')
    }
  }
}

/**
 * Vault down or refusing us is not the caller's fault and may pass: 503, retry later. The reason
 * (Vault's address, what it said) is for the operator: the client logged it, and `cause` keeps
 * it for the step journal; the HTTP answer says only that the secrets manager is unavailable.
 */
function unavailable(err: unknown, what: string): Error {
  if (err instanceof VaultUnreachableError || err instanceof VaultRefusedError || err instanceof VaultRequestError) {
    const failure = new UnavailableError('the secrets manager is unavailable', `key material cannot be ${what} now; retry later`)
    failure.cause = err
    return failure
  }
  return err instanceof Error ? err : new Error(String(err))
}
