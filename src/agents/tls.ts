/**
 * The development certificate authority for `nodeplane up` and tests: a CA and a gateway
 * certificate it signs, kept in a directory (keys 0600) and reused on the next start. Production
 * passes its own certificate and key (AGENT_GATEWAY_TLS_CERT_FILE / _KEY_FILE).
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import forge from 'node-forge'

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

const CA_VALIDITY_YEARS = 10
const CERT_VALIDITY_DAYS = 825

/** Creates the CA and gateway certificate in `dir` unless they are already there. */
export function ensureDevCertificates(dir: string, hosts: readonly string[] = ['localhost', '127.0.0.1', '::1']): TlsFiles {
  const files: TlsFiles = {
    caFile: path.join(dir, 'ca.pem'),
    certFile: path.join(dir, 'gateway.pem'),
    keyFile: path.join(dir, 'gateway-key.pem'),
  }
  if (fs.existsSync(files.caFile) && fs.existsSync(files.certFile) && fs.existsSync(files.keyFile)) return files
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 })

  const caKeys = rsaKeyPair()
  const ca = forge.pki.createCertificate()
  ca.publicKey = caKeys.publicKey
  ca.serialNumber = serial()
  ca.validity.notBefore = new Date(Date.now() - 60_000)
  ca.validity.notAfter = new Date(Date.now() + CA_VALIDITY_YEARS * 365 * 86_400_000)
  const caName = [{ name: 'commonName', value: 'nodeplane development agent CA' }]
  ca.setSubject(caName)
  ca.setIssuer(caName)
  ca.setExtensions([
    { name: 'basicConstraints', cA: true, critical: true },
    { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true },
    { name: 'subjectKeyIdentifier' },
  ])
  ca.sign(caKeys.privateKey, forge.md.sha256.create())

  const gatewayKeys = rsaKeyPair()
  const cert = forge.pki.createCertificate()
  cert.publicKey = gatewayKeys.publicKey
  cert.serialNumber = serial()
  cert.validity.notBefore = new Date(Date.now() - 60_000)
  cert.validity.notAfter = new Date(Date.now() + CERT_VALIDITY_DAYS * 86_400_000)
  cert.setSubject([{ name: 'commonName', value: 'nodeplane agent-gateway' }])
  cert.setIssuer(caName)
  cert.setExtensions([
    { name: 'basicConstraints', cA: false },
    { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
    { name: 'extKeyUsage', serverAuth: true },
    {
      name: 'subjectAltName',
      altNames: hosts.map((host) => (/^[\d.]+$|:/.test(host) ? { type: 7, ip: host } : { type: 2, value: host })),
    },
  ])
  cert.sign(caKeys.privateKey, forge.md.sha256.create())

  writeFile(path.join(dir, 'ca-key.pem'), forge.pki.privateKeyToPem(caKeys.privateKey), 0o600)
  writeFile(files.keyFile, forge.pki.privateKeyToPem(gatewayKeys.privateKey), 0o600)
  writeFile(files.certFile, forge.pki.certificateToPem(cert), 0o644)
  // Written last: its presence means the set is complete.
  writeFile(files.caFile, forge.pki.certificateToPem(ca), 0o644)
  return files
}

export function readTlsMaterial(files: TlsFiles): TlsMaterial {
  return { ca: fs.readFileSync(files.caFile), cert: fs.readFileSync(files.certFile), key: fs.readFileSync(files.keyFile) }
}

/** Node's native generator: forge's pure-JS one takes seconds per key. */
function rsaKeyPair(): { publicKey: forge.pki.rsa.PublicKey; privateKey: forge.pki.rsa.PrivateKey } {
  const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 })
  const pem = privateKey.export({ type: 'pkcs1', format: 'pem' }).toString()
  const forgeKey = forge.pki.privateKeyFromPem(pem)
  return { privateKey: forgeKey, publicKey: forge.pki.setRsaPublicKey(forgeKey.n, forgeKey.e) }
}

function serial(): string {
  // Positive (leading nibble < 8) 16-byte serial number.
  return '0' + crypto.randomBytes(15).toString('hex')
}

function writeFile(file: string, content: string, mode: number): void {
  const tmp = `${file}.${process.pid}.tmp`
  fs.writeFileSync(tmp, content, { mode })
  fs.renameSync(tmp, file)
}
