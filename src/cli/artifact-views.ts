/** Terminal rendering of the artifact store's records (`nodeplane artifact list|show|add|remove`). */
import type { ArtifactView } from '../artifacts/service.js'
import { renderTable } from './display.js'
import { age, moment } from './human-time.js'

function signedBy(a: ArtifactView): string {
  return a.signed ? `key ${a.key_id ?? '?'}` : 'UNSIGNED (rollouts refuse it)'
}

export function renderArtifacts(artifacts: readonly ArtifactView[]): string {
  if (artifacts.length === 0) return 'No artifacts stored. Add one with `nodeplane artifact add FILE --binary NAME --version V --key release.key`.'
  return renderTable(artifacts, [
    { header: 'binary', value: (a) => a.binary_name },
    { header: 'version', value: (a) => a.version },
    { header: 'sha256', value: (a) => `${a.sha256.slice(0, 'sha256:'.length + 16)}…` },
    { header: 'size', value: (a) => String(a.size_bytes) },
    { header: 'signed', value: signedBy },
    { header: 'added', value: (a) => age(a.created_at) },
  ])
}

export function describeArtifact(a: ArtifactView): string {
  return [
    `${a.binary_name} ${a.version}`,
    `  sha256:    ${a.sha256}`,
    `  size:      ${a.size_bytes} bytes`,
    `  signed:    ${signedBy(a)}`,
    ...(a.signature ? [`  signature: ${a.signature}`] : []),
    `  added:     ${moment(a.created_at)}`,
  ].join('\n')
}
