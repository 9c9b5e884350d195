/**
 * A small development PKI for `nodeplane up`, `nodeplane certs dev` and tests: a certificate
 * authority and the server and client certificates it signs (RSA 2048, SHA-256). Production
 * passes certificates from its own PKI instead.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import { createRequire } from 'node:module'
import type * as Forge from 'node-forge'

const require = createRequire(import.meta.url)
let loadedForge: typeof Forge | undefined

/**
 * node-forge, loaded when a certificate is first made: a daemon that finds its certificates
 * already made (the usual start) never needs it, and it takes about 0.1 s of CPU to load.
 */
function nodeForge(): typeof Forge {
  loadedForge ??= require('node-forge') as typeof Forge
  return loadedForge
}

const CA_VALIDITY_YEARS = 10
const CERT_VALIDITY_DAYS = 825

export interface CertificateAuthority {
  certPem: string
  keyPem: string
}

export interface IssuedCertificate {
  certPem: string
  keyPem: string
}

export function createCertificateAuthority(commonName: string): CertificateAuthority {
  const forge = nodeForge()
  const keys = rsaKeyPair()
  const ca = forge.pki.createCertificate()
  ca.publicKey = keys.publicKey
  ca.serialNumber = serial()
  ca.validity.notBefore = new Date(Date.now() - 60_000)
  ca.validity.notAfter = new Date(Date.now() + CA_VALIDITY_YEARS * 365 * 86_400_000)
  const name = [{ name: 'commonName', value: commonName }]
  ca.setSubject(name)
  ca.setIssuer(name)
  ca.setExtensions([
    { name: 'basicConstraints', cA: true, critical: true },
    { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true },
    { name: 'subjectKeyIdentifier' },
  ])
  ca.sign(keys.privateKey, forge.md.sha256.create())
  return { certPem: forge.pki.certificateToPem(ca), keyPem: keys.pem }
}

export interface CertificateRequest {
  commonName: string
  /** server: serverAuth with these names as subjectAltName; client: clientAuth. */
  usage: 'server' | 'client'
  hosts?: readonly string[]
}

export function issueCertificate(authority: CertificateAuthority, request: CertificateRequest): IssuedCertificate {
  const forge = nodeForge()
  const caCert = forge.pki.certificateFromPem(authority.certPem)
  const caKey = forge.pki.privateKeyFromPem(authority.keyPem)
  const keys = rsaKeyPair()
  const cert = forge.pki.createCertificate()
  cert.publicKey = keys.publicKey
  cert.serialNumber = serial()
  cert.validity.notBefore = new Date(Date.now() - 60_000)
  cert.validity.notAfter = new Date(Date.now() + CERT_VALIDITY_DAYS * 86_400_000)
  cert.setSubject([{ name: 'commonName', value: request.commonName }])
  cert.setIssuer(caCert.subject.attributes)
  const extensions: object[] = [
    { name: 'basicConstraints', cA: false },
    { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
    request.usage === 'server' ? { name: 'extKeyUsage', serverAuth: true } : { name: 'extKeyUsage', clientAuth: true },
  ]
  const hosts = request.hosts ?? []
  if (hosts.length > 0) {
    extensions.push({
      name: 'subjectAltName',
      altNames: hosts.map((host) => (/^[\d.]+$|:/.test(host) ? { type: 7, ip: host } : { type: 2, value: host })),
    })
  }
  cert.setExtensions(extensions)
  cert.sign(caKey, forge.md.sha256.create())
  return { certPem: forge.pki.certificateToPem(cert), keyPem: keys.pem }
}

export const LOCAL_HOSTS: readonly string[] = ['localhost', '127.0.0.1', '::1']

/** Written to a temporary name and renamed, so a reader never sees half a file. */
export function writePem(file: string, content: string, mode: number): void {
  const tmp = `${file}.${process.pid}.tmp`
  fs.writeFileSync(tmp, content, { mode })
  fs.renameSync(tmp, file)
}

/**
 * Node's native generator: forge's pure-JS one takes seconds per key. The key file is Node's own
 * encoding, not forge's re-encoding of it: forge now and then writes an integer with a leading
 * zero byte, which OpenSSL refuses ("illegal padding").
 */
function rsaKeyPair(): { publicKey: Forge.pki.rsa.PublicKey; privateKey: Forge.pki.rsa.PrivateKey; pem: string } {
  const forge = nodeForge()
  const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 })
  const pem = privateKey.export({ type: 'pkcs1', format: 'pem' }).toString()
  const forgeKey = forge.pki.privateKeyFromPem(pem)
  return { privateKey: forgeKey, publicKey: forge.pki.setRsaPublicKey(forgeKey.n, forgeKey.e), pem }
}

/**
 * A 16-byte serial number that is a minimal DER INTEGER as forge writes it (the hex as is): first
 * byte 0x01-0x7f, so positive and without a leading zero byte, which OpenSSL refuses.
 */
export function serial(): string {
  const bytes = crypto.randomBytes(16)
  bytes[0] = ((bytes[0] as number) & 0x7f) | 0x01
  return bytes.toString('hex')
}
