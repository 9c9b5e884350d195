/**
 * Mutual TLS between the control plane and the payment service (spec: "TLS 1.3 minimum with
 * mutual TLS; the client certificate's common name must be in an allowed list"). The
 * development set made by `nodeplane certs dev` and `nodeplane up` lives in one directory
 * (default <data dir>/payments-ca/): a CA, the service's server certificate, and one client
 * certificate per allowed caller. Keys are 0600; an existing CA is reused.
 */
import fs from 'node:fs'
import path from 'node:path'
import { ValidationError } from '../errors.js'
import { createCertificateAuthority, issueCertificate, LOCAL_HOSTS, writePem, type CertificateAuthority } from '../tls/dev-pki.js'

/** The common name of the control plane's client certificate; the default allow-list. */
export const CONTROL_PLANE_CLIENT_NAME = 'nodeplane-control-plane'
export const PAYMENT_SERVICE_CERT_NAME = 'nodeplane-payment-service'

export interface ClientCertificateFiles {
  name: string
  certFile: string
  keyFile: string
}

export interface PaymentTlsFiles {
  dir: string
  caFile: string
  serverCertFile: string
  serverKeyFile: string
  clients: ClientCertificateFiles[]
}

export function paymentsCaDir(dataDir: string): string {
  return path.join(dataDir, 'payments-ca')
}

const CLIENT_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/

export function clientCertificateFiles(dir: string, name: string): ClientCertificateFiles {
  if (!CLIENT_NAME.test(name)) throw new ValidationError(`client name "${name.slice(0, 70)}" must be 1-64 letters, digits, ".", "_" or "-"`)
  return { name, certFile: path.join(dir, `client-${name}.pem`), keyFile: path.join(dir, `client-${name}-key.pem`) }
}

/**
 * Makes (or completes) the development set in `dir`: CA, server certificate for `hosts`, and a
 * client certificate for each of `clients` (default: the control plane). Existing files are kept.
 */
export function ensurePaymentDevCertificates(dir: string, options: { clients?: readonly string[]; hosts?: readonly string[] } = {}): PaymentTlsFiles {
  const clients = (options.clients ?? [CONTROL_PLANE_CLIENT_NAME]).map((name) => clientCertificateFiles(dir, name))
  const files: PaymentTlsFiles = {
    dir,
    caFile: path.join(dir, 'ca.pem'),
    serverCertFile: path.join(dir, 'server.pem'),
    serverKeyFile: path.join(dir, 'server-key.pem'),
    clients,
  }
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 })
  const caKeyFile = path.join(dir, 'ca-key.pem')
  let ca: CertificateAuthority
  if (fs.existsSync(files.caFile) && fs.existsSync(caKeyFile)) {
    ca = { certPem: fs.readFileSync(files.caFile, 'utf8'), keyPem: fs.readFileSync(caKeyFile, 'utf8') }
  } else {
    ca = createCertificateAuthority('nodeplane development payments CA')
    writePem(caKeyFile, ca.keyPem, 0o600)
    writePem(files.caFile, ca.certPem, 0o644)
  }
  if (!fs.existsSync(files.serverCertFile) || !fs.existsSync(files.serverKeyFile)) {
    const server = issueCertificate(ca, { commonName: PAYMENT_SERVICE_CERT_NAME, usage: 'server', hosts: options.hosts ?? LOCAL_HOSTS })
    writePem(files.serverKeyFile, server.keyPem, 0o600)
    writePem(files.serverCertFile, server.certPem, 0o644)
  }
  for (const client of clients) {
    if (fs.existsSync(client.certFile) && fs.existsSync(client.keyFile)) continue
    const issued = issueCertificate(ca, { commonName: client.name, usage: 'client' })
    writePem(client.keyFile, issued.keyPem, 0o600)
    writePem(client.certFile, issued.certPem, 0o644)
  }
  return files
}
