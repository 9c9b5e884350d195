import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { nodeplane, tempDir } from '../helpers/cli.js'

interface CertsResult {
  dir: string
  ca_file: string
  server_cert_file: string
  server_key_file: string
  clients: Array<{ name: string; cert_file: string; key_file: string }>
}

const mode = (file: string) => fs.statSync(file).mode & 0o777
const cert = (file: string) => new crypto.X509Certificate(fs.readFileSync(file))

describe('nodeplane certs dev', () => {
  let cwd: string

  beforeAll(() => {
    cwd = fs.realpathSync(tempDir())
  })
  afterAll(() => {
    if (cwd) fs.rmSync(cwd, { recursive: true, force: true })
  })

  it('writes a CA, a server certificate and the control plane client certificate, keys 0600; --json names every file', async () => {
    const dir = path.join(cwd, 'set')
    const result = await nodeplane(['certs', 'dev', '--dir', dir, '--json'], { cwd })
    expect(result.exitCode, result.stderr).toBe(0)
    const out = JSON.parse(result.stdout) as CertsResult
    expect(out).toEqual({
      dir,
      ca_file: path.join(dir, 'ca.pem'),
      server_cert_file: path.join(dir, 'server.pem'),
      server_key_file: path.join(dir, 'server-key.pem'),
      clients: [{ name: 'nodeplane-control-plane', cert_file: path.join(dir, 'client-nodeplane-control-plane.pem'), key_file: path.join(dir, 'client-nodeplane-control-plane-key.pem') }],
    })
    for (const file of [out.ca_file, out.server_cert_file, out.server_key_file, out.clients[0]?.cert_file as string, out.clients[0]?.key_file as string]) {
      expect(fs.existsSync(file), file).toBe(true)
    }
    expect(mode(out.server_key_file)).toBe(0o600)
    expect(mode(out.clients[0]?.key_file as string)).toBe(0o600)
    expect(mode(path.join(dir, 'ca-key.pem'))).toBe(0o600)
    expect(mode(dir) & 0o077).toBe(0)

    const ca = cert(out.ca_file)
    expect(ca.ca).toBe(true)
    const server = cert(out.server_cert_file)
    expect(server.subject).toContain('CN=nodeplane-payment-service')
    expect(server.checkIssued(ca)).toBe(true)
    expect(server.verify(ca.publicKey)).toBe(true)
    expect(server.checkHost('localhost')).toBe('localhost')
    expect(server.checkIP('127.0.0.1')).toBe('127.0.0.1')
    const client = cert(out.clients[0]?.cert_file as string)
    expect(client.subject).toContain('CN=nodeplane-control-plane')
    expect(client.verify(ca.publicKey)).toBe(true)
    // The key file belongs to the certificate next to it.
    const key = crypto.createPrivateKey(fs.readFileSync(out.clients[0]?.key_file as string))
    expect(client.checkPrivateKey(key)).toBe(true)
  })

  it('again keeps the CA and the existing certificates byte for byte; --client adds another, signed by the same CA', async () => {
    const dir = path.join(cwd, 'again')
    const first = JSON.parse((await nodeplane(['certs', 'dev', '--dir', dir, '--json'], { cwd })).stdout) as CertsResult
    const before = new Map([first.ca_file, path.join(dir, 'ca-key.pem'), first.server_cert_file, first.server_key_file, first.clients[0]?.cert_file as string].map((f) => [f, fs.readFileSync(f)]))

    const same = await nodeplane(['certs', 'dev', '--dir', dir, '--json'], { cwd })
    expect(same.exitCode, same.stderr).toBe(0)
    expect(JSON.parse(same.stdout)).toEqual(first)

    const other = await nodeplane(['certs', 'dev', '--dir', dir, '--client', 'other', '--json'], { cwd })
    expect(other.exitCode, other.stderr).toBe(0)
    const added = JSON.parse(other.stdout) as CertsResult
    expect(added.ca_file).toBe(first.ca_file)
    expect(added.clients).toEqual([{ name: 'other', cert_file: path.join(dir, 'client-other.pem'), key_file: path.join(dir, 'client-other-key.pem') }])
    expect(mode(path.join(dir, 'client-other-key.pem'))).toBe(0o600)
    for (const [file, bytes] of before) expect(fs.readFileSync(file).equals(bytes), file).toBe(true)
    const otherCert = cert(path.join(dir, 'client-other.pem'))
    expect(otherCert.subject).toContain('CN=other')
    expect(otherCert.verify(cert(first.ca_file).publicKey)).toBe(true)

    const human = await nodeplane(['certs', 'dev', '--dir', dir, '--client', 'other', '--client', 'nodeplane-control-plane'], { cwd })
    expect(human.exitCode, human.stderr).toBe(0)
    expect(human.stdout).toContain(`Development certificates in ${dir}:`)
    expect(human.stdout).toContain(`client other: ${path.join(dir, 'client-other.pem')}`)
    expect(human.stdout).toContain('client nodeplane-control-plane:')
  })

  it('defaults to <data dir>/payments-ca: ./.nodeplane in the working directory, or --data-dir', async () => {
    const result = await nodeplane(['certs', 'dev', '--json'], { cwd })
    expect(result.exitCode, result.stderr).toBe(0)
    expect((JSON.parse(result.stdout) as CertsResult).dir).toBe(path.join(cwd, '.nodeplane', 'payments-ca'))
    expect(fs.existsSync(path.join(cwd, '.nodeplane', 'payments-ca', 'ca.pem'))).toBe(true)

    const elsewhere = path.join(cwd, 'data')
    const flagged = await nodeplane(['certs', 'dev', '--data-dir', elsewhere, '--json'], { cwd })
    expect((JSON.parse(flagged.stdout) as CertsResult).ca_file).toBe(path.join(elsewhere, 'payments-ca', 'ca.pem'))
  })

  it('an invalid client name exits 2 with one line, and writes nothing', async () => {
    const dir = path.join(cwd, 'invalid')
    for (const name of ['bad name!', '../escape', '', 'x'.repeat(65)]) {
      const result = await nodeplane(['certs', 'dev', '--dir', dir, '--client', 'fine', '--client', name], { cwd })
      expect(result.exitCode, name).toBe(2)
      const lines = result.stderr.split('\n').filter((l) => l.trim().length > 0)
      expect(lines, name).toHaveLength(1)
      expect(lines[0]).toMatch(/^Error: client name ".*" must be 1-64 letters, digits/)
      expect(result.stdout).toBe('')
    }
    expect(fs.existsSync(dir)).toBe(false)
    const json = await nodeplane(['certs', 'dev', '--dir', dir, '--client', 'bad name!', '--json'], { cwd })
    expect(json.exitCode).toBe(2)
    expect(JSON.parse(json.stdout)).toMatchObject({ error: { name: 'ValidationError', exit_code: 2 } })
  })
})
