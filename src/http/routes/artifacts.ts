/**
 * `GET /api/v1/artifacts/{binary_name}/{version}` (scope `admin`; docs/artifacts.md): one stored
 * artifact as `nodeplane artifact show` prints it, so an operator's `rollout create --artifact`
 * can name it by binary and version and send its digest. Read-only: artifacts are added and
 * removed on the control plane's machine (`nodeplane artifact add|remove`), never over the API.
 */
import type { Db } from '../../db/knex.js'
import { NotFoundError } from '../../errors.js'
import { BINARY_NAME, toArtifactView, VERSION } from '../../artifacts/service.js'
import { findArtifact } from '../../artifacts/store.js'
import { defineRoute, errorResponse, type ApiRoute } from '../route.js'
import { z } from '../zod.js'

export interface ArtifactRouteDeps {
  db: Db
}

const params = z.object({
  binary_name: z.string().regex(BINARY_NAME, 'letters, digits, ".", "_" or "-" (at most 100)').openapi({ example: 'devnet-node' }),
  version: z.string().regex(VERSION, 'letters, digits, ".", "_", "+" or "-", starting with a letter or digit (at most 64)').openapi({ example: '1.2.0' }),
})

const artifactView = z
  .object({
    binary_name: z.string(),
    version: z.string(),
    sha256: z.string().openapi({ description: 'sha256:<hex> of the bytes: the target_binary_checksum of a rollout naming it', example: `sha256:${'ab'.repeat(32)}` }),
    size_bytes: z.number().int(),
    signed: z.boolean().openapi({ description: 'false: rollouts refuse it' }),
    key_id: z.string().nullable().openapi({ description: 'The release key that signed it (first 16 hex digits of SHA-256 of its public key)' }),
    signature: z.string().nullable().openapi({ description: 'base64 Ed25519 release signature' }),
    created_at: z.string().datetime(),
  })
  .openapi('Artifact')

export function artifactRoutes(deps: ArtifactRouteDeps): ApiRoute[] {
  return [
    defineRoute({
      method: 'get',
      path: '/api/v1/artifacts/{binary_name}/{version}',
      summary: 'One stored artifact: its digest, size and signature',
      tags: ['artifacts'],
      auth: { scope: 'admin' },
      request: { params },
      responses: { 200: artifactView, 404: errorResponse('No such binary and version in the artifact store') },
    }).handle(async ({ params: p }) => {
      const record = await findArtifact(deps.db, p.binary_name, p.version)
      if (!record) throw new NotFoundError('artifact not found', `no ${p.binary_name} ${p.version} in the artifact store (nodeplane artifact list)`)
      return { status: 200, body: toArtifactView(record) }
    }),
  ]
}
