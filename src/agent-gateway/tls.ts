/**
 * The development certificate authority for `nodeplane up` and tests: a CA and a gateway
 * certificate it signs, kept in a directory (keys 0600) and reused on the next start. Production
 * passes its own certificate and key (AGENT_GATEWAY_TLS_CERT_FILE / _KEY_FILE).
 */
import fs from 'node:fs'
import path from 'node:path'
import { createCertificateAuthority, issueCertificate, LOCAL_HOSTS, writePem } from '../tls/dev-pki.js'

export interface TlsFiles {
  caFile: string
  certFile: string
  keyFile: string
}

export interface TlsMaterial {
  ca: Buffer
  cert: Buffer
  key: Buffer
}

/** Creates the CA and gateway certificate in `dir` unless they are already there. */
export function ensureDevCertificates(dir: string, hosts: readonly string[] = LOCAL_HOSTS): TlsFiles {
  const files: TlsFiles = {
    caFile: path.join(dir, 'ca.pem'),
    certFile: path.join(dir, 'gateway.pem'),
    keyFile: path.join(dir, 'gateway-key.pem'),
  }
  if (fs.existsSync(files.caFile) && fs.existsSync(files.certFile) && fs.existsSync(files.keyFile)) return files
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 })
  const ca = createCertificateAuthority('nodeplane development agent CA')
  const gateway = issueCertificate(ca, { commonName: 'nodeplane agent-gateway', usage: 'server', hosts })
  writePem(path.join(dir, 'ca-key.pem'), ca.keyPem, 0o600)
  writePem(files.keyFile, gateway.keyPem, 0o600)
  writePem(files.certFile, gateway.certPem, 0o644)
  // Written last: its presence means the set is complete.
  writePem(files.caFile, ca.certPem, 0o644)
  return files
}

export function readTlsMaterial(files: TlsFiles): TlsMaterial {
  return { ca: fs.readFileSync(files.caFile), cert: fs.readFileSync(files.certFile), key: fs.readFileSync(files.keyFile) }
}
