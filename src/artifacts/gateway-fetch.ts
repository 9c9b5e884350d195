/**
 * The agent-gateway's FetchArtifact (proto/agent.proto; docs/artifacts.md, "Serving artifacts to
 * agents"): streams a stored artifact's bytes to an agent that presents a valid node token, over
 * the gateway's TLS. The request names binary, version and digest; anything not stored with
 * exactly those (unknown, other bytes, bytes gone from the blob store, a gateway without a store)
 * is the same NOT_FOUND "artifact not found", so the answer says nothing about what is stored
 * under another digest. The agent verifies checksum and signature itself: this route only carries.
 *
 * Chunks go out as the blob store reads them, waiting for the agent when its window is full; an
 * agent that goes away mid-stream cancels the call and the read stops there.
 */
import type { Readable } from 'node:stream'
import * as grpc from '@grpc/grpc-js'
import type { Queryable } from '../db/knex.js'
import type { Logger } from '../log.js'
import type { ArtifactBlobStore } from './blob-store.js'
import { BINARY_NAME, VERSION } from './service.js'
import { findArtifact } from './store.js'
import type { StoredArtifactRef } from './stored-url.js'

export type FetchArtifactCall = grpc.ServerWritableStream<StoredArtifactRef, { data: Buffer }>

export interface FetchArtifactDeps {
  db: Queryable
  /** The control plane's artifact store; absent: every fetch is "artifact not found". */
  blobs: ArtifactBlobStore | undefined
  logger: Logger
  /** The gateway's agent authentication (UNAUTHENTICATED, FAILED_PRECONDITION for a retired node). */
  authenticate(metadata: grpc.Metadata): Promise<{ nodeId: string }>
  /** The gateway's mapping of an authentication or internal error to a status. */
  toStatus(err: unknown, call: string): Partial<grpc.StatusObject>
}

const NOT_FOUND = { code: grpc.status.NOT_FOUND, details: 'artifact not found' }

export function fetchArtifactHandler(deps: FetchArtifactDeps): (call: FetchArtifactCall) => void {
  return (call) => void serve(deps, call)
}

async function serve(deps: FetchArtifactDeps, call: FetchArtifactCall): Promise<void> {
  let nodeId: string
  try {
    nodeId = (await deps.authenticate(call.metadata)).nodeId
  } catch (err) {
    call.emit('error', deps.toStatus(err, 'FetchArtifact'))
    return
  }
  const { binary_name, version, sha256 } = call.request
  if (!BINARY_NAME.test(binary_name) || !VERSION.test(version) || !/^[0-9a-f]{64}$/.test(sha256)) {
    call.emit('error', { code: grpc.status.INVALID_ARGUMENT, details: 'binary_name, version and sha256 (64 lowercase hex) name a stored artifact' })
    return
  }
  const log = deps.logger.child({ node_id: nodeId, binary_name, version })
  let bytes: Readable
  try {
    const record = deps.blobs ? await findArtifact(deps.db, binary_name, version) : undefined
    if (!deps.blobs || !record || record.sha256 !== sha256 || !(await deps.blobs.has(sha256))) {
      log.warn({ store: deps.blobs ? 'configured' : 'none' }, 'artifact not found for an agent')
      call.emit('error', NOT_FOUND)
      return
    }
    bytes = await deps.blobs.read(sha256)
  } catch (err) {
    call.emit('error', deps.toStatus(err, 'FetchArtifact'))
    return
  }
  try {
    for await (const chunk of bytes) {
      if (call.cancelled) break
      if (!call.write({ data: chunk as Buffer })) await drainedOrCancelled(call)
    }
  } catch (err) {
    log.warn({ err }, 'artifact stream to an agent failed')
    call.emit('error', { code: grpc.status.UNAVAILABLE, details: 'artifact stream failed; retry' })
    return
  } finally {
    bytes.destroy()
  }
  if (call.cancelled) {
    log.info('agent cancelled the artifact download')
    return
  }
  call.end()
  log.info('artifact served to an agent')
}

function drainedOrCancelled(call: FetchArtifactCall): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      call.off('drain', done)
      call.off('cancelled', done)
      resolve()
    }
    call.on('drain', done)
    call.on('cancelled', done)
  })
}
