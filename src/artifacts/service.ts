/**
 * The artifact store's operations (docs/artifacts.md): add a file as `binary_name` `version`,
 * signed with a release key, or with a detached signature checked against the release public
 * keys, or unsigned (a rollout then refuses it); show, list, remove.
 *
 * add: the bytes go to the blob store first, then the row, so a row never names a missing blob;
 * dying in between leaves an unreferenced blob that the next add of the same bytes reuses.
 * remove: refused while a rollout or a node needs the blob (store.ts, artifactInUse); then the
 * row goes, then the blob when no other row still has those bytes.
 */
import fs from 'node:fs'
import type { Db } from '../db/knex.js'
import { ConflictError, NotFoundError, ValidationError } from '../errors.js'
import { digestFile, LocalBlobStore, type ArtifactBlobStore } from './blob-store.js'
import { signArtifact, verifyingKey, type ArtifactIdentity, type ReleaseKeyPair, type ReleasePublicKey } from './signing.js'
import { storedArtifactUrl } from './stored-url.js'
import { alreadyStored, artifactInUse, deleteArtifact, digestInUse, findArtifact, insertArtifact, listArtifacts, type ArtifactRecord } from './store.js'

export const BINARY_NAME = /^[A-Za-z0-9._-]{1,100}$/
export const VERSION = /^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$/

/** What `artifact list|show|add --json` print. */
export interface ArtifactView {
  binary_name: string
  version: string
  /** `sha256:<hex>` */
  sha256: string
  size_bytes: number
  signed: boolean
  key_id: string | null
  signature: string | null
  created_at: string
}

export function toArtifactView(record: ArtifactRecord): ArtifactView {
  return {
    binary_name: record.binary_name,
    version: record.version,
    sha256: `sha256:${record.sha256}`,
    size_bytes: record.size_bytes,
    signed: record.signature !== null,
    key_id: record.key_id,
    signature: record.signature,
    created_at: record.created_at.toISOString(),
  }
}

export function checkArtifactName(binaryName: string, version: string): void {
  const problems: string[] = []
  if (!BINARY_NAME.test(binaryName)) problems.push(`--binary "${binaryName.slice(0, 100)}": letters, digits, ".", "_" or "-" (at most 100)`)
  if (!VERSION.test(version)) problems.push(`--version "${version.slice(0, 64)}": letters, digits, ".", "_", "+" or "-", starting with a letter or digit (at most 64)`)
  if (problems.length > 0) throw new ValidationError('invalid artifact name', problems.join('; '))
}

export type Signing =
  | { kind: 'key'; key: ReleaseKeyPair }
  | { kind: 'detached'; signature: string; trusted: readonly ReleasePublicKey[] }
  | { kind: 'unsigned' }

export interface AddArtifact {
  file: string
  binaryName: string
  version: string
  signing: Signing
  now: Date
}

/** The statement a release key signs for this file (`nodeplane artifact sign` prints its signature). */
export async function identify(file: string, binaryName: string, version: string): Promise<ArtifactIdentity> {
  checkArtifactName(binaryName, version)
  let stat: fs.Stats
  try {
    stat = await fs.promises.stat(file)
  } catch (err) {
    throw new ValidationError(`cannot read ${file}`, (err as NodeJS.ErrnoException).code ?? (err as Error).message)
  }
  if (!stat.isFile()) throw new ValidationError(`${file} is not a file`)
  return { binary_name: binaryName, version, ...(await digestFile(file)) }
}

export async function addArtifact(db: Db, blobs: ArtifactBlobStore, input: AddArtifact): Promise<ArtifactRecord> {
  const identity = await identify(input.file, input.binaryName, input.version)
  let signature: string | null = null
  let keyId: string | null = null
  if (input.signing.kind === 'key') {
    signature = signArtifact(identity, input.signing.key.secretKey)
    keyId = input.signing.key.key_id
  } else if (input.signing.kind === 'detached') {
    const key = verifyingKey(identity, input.signing.signature.trim(), input.signing.trusted)
    if (!key) {
      throw new ValidationError(
        'signature mismatch',
        input.signing.trusted.length === 0
          ? 'no release public key to check it against: give --public-key or set ARTIFACT_RELEASE_PUBLIC_KEYS'
          : `the signature is not one of the release keys (${input.signing.trusted.map((k) => k.key_id).join(', ')}) over this file as ${identity.binary_name} ${identity.version}`,
      )
    }
    signature = input.signing.signature.trim()
    keyId = key.key_id
  }
  if (await findArtifact(db, identity.binary_name, identity.version)) throw alreadyStored(identity)
  await blobs.put(identity.sha256, input.file)
  return insertArtifact(db, { ...identity, signature, key_id: keyId }, input.now)
}

export async function requireArtifact(db: Db, binaryName: string, version: string): Promise<ArtifactRecord> {
  checkArtifactName(binaryName, version)
  const record = await findArtifact(db, binaryName, version)
  if (!record) throw new NotFoundError(`no artifact ${binaryName} ${version} in the store`, 'list them with `nodeplane artifact list`')
  return record
}

export { listArtifacts }

export async function removeArtifact(db: Db, blobs: ArtifactBlobStore, binaryName: string, version: string): Promise<ArtifactRecord> {
  const record = await requireArtifact(db, binaryName, version)
  const inUse = await artifactInUse(db, [storedArtifactUrl(record), ...(blobs instanceof LocalBlobStore ? [blobs.fileUrl(record.sha256)] : [])], record)
  if (inUse) throw new ConflictError(`${binaryName} ${version} is in use: ${inUse}`, 'remove it once no rollout or node needs it')
  if (!(await deleteArtifact(db, record.id))) throw new NotFoundError(`no artifact ${binaryName} ${version} in the store`, 'it was removed meanwhile')
  if (!(await digestInUse(db, record.sha256))) await blobs.remove(record.sha256)
  return record
}
