/**
 * A small development PKI for `nodeplane up`, `nodeplane certs dev` and tests: a certificate
 * authority and the server and client certificates it signs. Production passes certificates from
 * its own PKI instead.
 *
 * Keys are ECDSA P-256 and every certificate is signed with ECDSA-SHA256 by Node's crypto: an RSA
 * 2048 set cost `up` about 2 s of CPU at its first start (key generation, and signing in pure
 * JavaScript), an ECDSA one a few milliseconds. gRPC, NATS and OpenSSL accept both.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import net from 'node:net'
import {
  bitString,
  boolean,
  explicit,
  implicit,
  ipAddressBytes,
  namedBits,
  objectIdentifier,
  octetString,
  sequence,
  set,
  smallInteger,
  time,
  unsignedInteger,
  utf8String,
} from './der.js'

const CA_VALIDITY_YEARS = 10
const CERT_VALIDITY_DAYS = 825

const OID = {
  ecdsaWithSha256: '1.2.840.10045.4.3.2',
  sha256WithRsaEncryption: '1.2.840.113549.1.1.11',
  commonName: '2.5.4.3',
  subjectKeyIdentifier: '2.5.29.14',
  keyUsage: '2.5.29.15',
  subjectAltName: '2.5.29.17',
  basicConstraints: '2.5.29.19',
  extKeyUsage: '2.5.29.37',
  serverAuth: '1.3.6.1.5.5.7.3.1',
  clientAuth: '1.3.6.1.5.5.7.3.2',
} as const

/** keyUsage bits (RFC 5280 section 4.2.1.3). */
const KEY_USAGE = { digitalSignature: 0, keyCertSign: 5, cRLSign: 6 } as const

export interface CertificateAuthority {
  certPem: string
  keyPem: string
}

export interface IssuedCertificate {
  certPem: string
  keyPem: string
}

export interface CertificateRequest {
  commonName: string
  /** server: serverAuth with these names as subjectAltName; client: clientAuth. */
  usage: 'server' | 'client'
  hosts?: readonly string[]
}

export function createCertificateAuthority(commonName: string): CertificateAuthority {
  const { privateKey, publicKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' })
  const name = distinguishedName(commonName)
  const keyId = subjectKeyId(publicKey)
  const certPem = signCertificate({
    issuer: name,
    subject: name,
    notAfter: new Date(Date.now() + CA_VALIDITY_YEARS * 365 * 86_400_000),
    publicKey,
    extensions: [
      extension(OID.basicConstraints, sequence(boolean(true)), true),
      extension(OID.keyUsage, namedBits([KEY_USAGE.keyCertSign, KEY_USAGE.cRLSign]), true),
      extension(OID.subjectKeyIdentifier, octetString(keyId)),
    ],
    signingKey: privateKey,
  })
  return { certPem, keyPem: privateKeyPem(privateKey) }
}

export function issueCertificate(authority: CertificateAuthority, request: CertificateRequest): IssuedCertificate {
  const caCert = new crypto.X509Certificate(authority.certPem)
  const caKey = crypto.createPrivateKey(authority.keyPem)
  const { privateKey, publicKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' })
  const extensions = [
    extension(OID.basicConstraints, sequence()),
    extension(OID.keyUsage, namedBits([KEY_USAGE.digitalSignature]), true),
    extension(OID.extKeyUsage, sequence(objectIdentifier(request.usage === 'server' ? OID.serverAuth : OID.clientAuth))),
    extension(OID.subjectKeyIdentifier, octetString(subjectKeyId(publicKey))),
  ]
  const hosts = request.hosts ?? []
  if (hosts.length > 0) {
    const names = hosts.map((host) => (net.isIP(host) ? implicit(7, ipAddressBytes(host)) : implicit(2, Buffer.from(host, 'ascii'))))
    extensions.push(extension(OID.subjectAltName, sequence(...names)))
  }
  const certPem = signCertificate({
    issuer: Buffer.from(caCert.raw.subarray(...subjectRange(caCert.raw))),
    subject: distinguishedName(request.commonName),
    notAfter: new Date(Date.now() + CERT_VALIDITY_DAYS * 86_400_000),
    publicKey,
    extensions,
    signingKey: caKey,
  })
  return { certPem, keyPem: privateKeyPem(privateKey) }
}

export const LOCAL_HOSTS: readonly string[] = ['localhost', '127.0.0.1', '::1']

/** Written to a temporary name and renamed, so a reader never sees half a file. */
export function writePem(file: string, content: string, mode: number): void {
  const tmp = `${file}.${process.pid}.tmp`
  fs.writeFileSync(tmp, content, { mode })
  fs.renameSync(tmp, file)
}

/**
 * A 16-byte serial number that is a minimal positive DER INTEGER: first byte 0x01-0x7f, so
 * positive and without a leading zero byte, which OpenSSL refuses.
 */
export function serial(): string {
  const bytes = crypto.randomBytes(16)
  bytes[0] = ((bytes[0] as number) & 0x7f) | 0x01
  return bytes.toString('hex')
}

interface CertificateFields {
  issuer: Buffer
  subject: Buffer
  notAfter: Date
  publicKey: crypto.KeyObject
  extensions: Buffer[]
  signingKey: crypto.KeyObject
}

function signCertificate(fields: CertificateFields): string {
  // A CA made before the switch to ECDSA (an RSA key in an existing data directory) still signs.
  const algorithm =
    fields.signingKey.asymmetricKeyType === 'rsa'
      ? sequence(objectIdentifier(OID.sha256WithRsaEncryption), Buffer.from([0x05, 0x00]))
      : sequence(objectIdentifier(OID.ecdsaWithSha256))
  const tbs = sequence(
    explicit(0, smallInteger(2)), // v3
    unsignedInteger(Buffer.from(serial(), 'hex')),
    algorithm,
    fields.issuer,
    sequence(time(new Date(Date.now() - 60_000)), time(fields.notAfter)),
    fields.subject,
    fields.publicKey.export({ type: 'spki', format: 'der' }),
    explicit(3, sequence(...fields.extensions)),
  )
  const signature = crypto.sign('sha256', tbs, fields.signingKey)
  const der = sequence(tbs, algorithm, bitString(signature))
  const base64 = der.toString('base64').replace(/.{64}/g, '$&\n').replace(/\n$/, '')
  return `-----BEGIN CERTIFICATE-----\n${base64}\n-----END CERTIFICATE-----\n`
}

function distinguishedName(commonName: string): Buffer {
  return sequence(set(sequence(objectIdentifier(OID.commonName), utf8String(commonName))))
}

function extension(oid: string, value: Buffer, critical = false): Buffer {
  return sequence(objectIdentifier(oid), ...(critical ? [boolean(true)] : []), octetString(value))
}

/** RFC 5280 section 4.2.1.2 method 1: the SHA-1 of the subjectPublicKey bits. */
function subjectKeyId(publicKey: crypto.KeyObject): Buffer {
  // A P-256 SPKI ends with its BIT STRING: the unused-bits byte, then the 65-byte point.
  const spki = publicKey.export({ type: 'spki', format: 'der' })
  return crypto.createHash('sha1').update(spki.subarray(spki.length - 65)).digest()
}

function privateKeyPem(key: crypto.KeyObject): string {
  return key.export({ type: 'pkcs8', format: 'pem' }).toString()
}

/**
 * Where the subject Name sits in a certificate's DER, to copy it byte for byte as the issuer of
 * the certificates the CA signs (chain building compares the two as encoded).
 */
function subjectRange(der: Buffer): [number, number] {
  let offset = 0
  const enter = (): void => {
    offset += headerLength(der, offset)
  }
  const skip = (): void => {
    offset += headerLength(der, offset) + contentLength(der, offset)
  }
  enter() // Certificate
  enter() // TBSCertificate
  if (der[offset] === 0xa0) skip() // version
  skip() // serialNumber
  skip() // signature
  skip() // issuer
  skip() // validity
  const start = offset
  skip() // subject
  return [start, offset]
}

function headerLength(der: Buffer, offset: number): number {
  const first = der[offset + 1] as number
  return first < 0x80 ? 2 : 2 + (first & 0x7f)
}

function contentLength(der: Buffer, offset: number): number {
  const first = der[offset + 1] as number
  if (first < 0x80) return first
  let length = 0
  for (let i = 0; i < (first & 0x7f); i++) length = length * 256 + (der[offset + 2 + i] as number)
  return length
}
