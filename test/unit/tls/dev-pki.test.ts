import crypto from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { createCertificateAuthority, issueCertificate, serial } from '../../../src/tls/dev-pki.js'

describe('development PKI', () => {
  it('writes serial numbers as minimal positive DER integers (a leading zero byte is refused by OpenSSL)', () => {
    for (let i = 0; i < 2_000; i++) {
      const hex = serial()
      expect(hex).toMatch(/^[0-9a-f]{32}$/)
      const first = parseInt(hex.slice(0, 2), 16)
      expect(first).toBeGreaterThanOrEqual(0x01)
      expect(first).toBeLessThanOrEqual(0x7f)
    }
  })

  it('issues certificates and keys that OpenSSL parses, the certificate signed by the CA and matching its key', () => {
    const ca = createCertificateAuthority('test CA')
    const caCert = new crypto.X509Certificate(ca.certPem)
    expect(caCert.ca).toBe(true)
    for (const usage of ['server', 'client'] as const) {
      const issued = issueCertificate(ca, { commonName: `test ${usage}`, usage, hosts: usage === 'server' ? ['localhost', '127.0.0.1'] : [] })
      const cert = new crypto.X509Certificate(issued.certPem)
      const key = crypto.createPrivateKey(issued.keyPem)
      expect(cert.checkPrivateKey(key)).toBe(true)
      expect(cert.verify(caCert.publicKey)).toBe(true)
      expect(cert.subject).toBe(`CN=test ${usage}`)
      expect(cert.serialNumber).toMatch(/^[0-7][0-9A-F]{31}$/)
    }
  })
})
