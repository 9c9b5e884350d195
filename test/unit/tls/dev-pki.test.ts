import { execFileSync } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import tls from 'node:tls'
import { describe, expect, it } from 'vitest'
import { ipAddressBytes } from '../../../src/tls/der.js'
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
    expect(caCert.subject).toBe('CN=test CA')
    expect(caCert.verify(caCert.publicKey)).toBe(true)
    for (const usage of ['server', 'client'] as const) {
      const issued = issueCertificate(ca, { commonName: `test ${usage}`, usage, hosts: usage === 'server' ? ['localhost', '127.0.0.1', '::1'] : [] })
      const cert = new crypto.X509Certificate(issued.certPem)
      const key = crypto.createPrivateKey(issued.keyPem)
      expect(cert.checkPrivateKey(key)).toBe(true)
      expect(cert.verify(caCert.publicKey)).toBe(true)
      expect(cert.checkIssued(caCert)).toBe(true)
      expect(cert.ca).toBe(false)
      expect(cert.subject).toBe(`CN=test ${usage}`)
      expect(cert.serialNumber).toMatch(/^[0-7][0-9A-F]{31}$/)
      expect(cert.keyUsage).toEqual([usage === 'server' ? '1.3.6.1.5.5.7.3.1' : '1.3.6.1.5.5.7.3.2'])
      if (usage === 'server') {
        expect(cert.subjectAltName).toBe('DNS:localhost, IP Address:127.0.0.1, IP Address:0:0:0:0:0:0:0:1')
        expect(cert.checkHost('localhost')).toBe('localhost')
        expect(cert.checkIP('127.0.0.1')).toBe('127.0.0.1')
        expect(cert.checkHost('example.org')).toBeUndefined()
      }
    }
  })

  it('makes a mutual TLS handshake work: the server and the client each verify the other against the CA', async () => {
    const ca = createCertificateAuthority('handshake CA')
    const server = issueCertificate(ca, { commonName: 'server', usage: 'server', hosts: ['127.0.0.1'] })
    const client = issueCertificate(ca, { commonName: 'a client', usage: 'client' })
    const listener = tls.createServer({ key: server.keyPem, cert: server.certPem, ca: ca.certPem, requestCert: true, rejectUnauthorized: true }, (socket) => {
      socket.end(`hello ${(socket.getPeerCertificate().subject as { CN: string }).CN}`)
    })
    await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve))
    const port = (listener.address() as { port: number }).port
    try {
      const answer = await new Promise<string>((resolve, reject) => {
        const socket = tls.connect({ host: '127.0.0.1', port, ca: ca.certPem, key: client.keyPem, cert: client.certPem }, () => undefined)
        let text = ''
        socket.on('data', (chunk: Buffer) => (text += chunk.toString()))
        socket.on('end', () => resolve(text))
        socket.on('error', reject)
      })
      expect(answer).toBe('hello a client')
      // A client certificate from another CA is refused.
      const stranger = issueCertificate(createCertificateAuthority('another CA'), { commonName: 'stranger', usage: 'client' })
      await expect(
        new Promise<string>((resolve, reject) => {
          const socket = tls.connect({ host: '127.0.0.1', port, ca: ca.certPem, key: stranger.keyPem, cert: stranger.certPem })
          socket.on('data', (chunk: Buffer) => resolve(chunk.toString()))
          socket.on('error', reject)
          socket.on('end', () => reject(new Error('closed without an answer')))
        }),
      ).rejects.toThrow()
    } finally {
      await new Promise<void>((resolve) => listener.close(() => resolve()))
    }
  })

  it('still issues from an RSA CA an existing data directory holds (made before the PKI switched to ECDSA)', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'legacy-ca-'))
    try {
      execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=legacy CA', '-days', '30', '-keyout', path.join(dir, 'ca.key'), '-out', path.join(dir, 'ca.pem')], { stdio: 'ignore' })
      const ca = { certPem: fs.readFileSync(path.join(dir, 'ca.pem'), 'utf8'), keyPem: fs.readFileSync(path.join(dir, 'ca.key'), 'utf8') }
      const issued = issueCertificate(ca, { commonName: 'client of the old CA', usage: 'client' })
      const caCert = new crypto.X509Certificate(ca.certPem)
      const cert = new crypto.X509Certificate(issued.certPem)
      expect(cert.verify(caCert.publicKey)).toBe(true)
      expect(cert.checkIssued(caCert)).toBe(true)
      expect(cert.issuer).toBe('CN=legacy CA')
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  })

  it('encodes IPv4 and IPv6 addresses for subjectAltName and refuses what it cannot name', () => {
    expect(ipAddressBytes('10.1.2.3')).toEqual(Buffer.from([10, 1, 2, 3]))
    expect(ipAddressBytes('::1').toString('hex')).toBe('00000000000000000000000000000001')
    expect(ipAddressBytes('fd00:1::2').toString('hex')).toBe('fd000001000000000000000000000002')
    expect(ipAddressBytes('2001:db8:0:0:1:0:0:1').toString('hex')).toBe('20010db8000000000001000000000001')
    expect(() => ipAddressBytes('::ffff:10.0.0.1')).toThrow('not an IP address this PKI can name')
    expect(() => ipAddressBytes('localhost')).toThrow('not an IP address this PKI can name')
  })
})
