/**
 * `nodeplane certs nats` and `nodeplane systemd generate --nats-dir`: the files they write are
 * the ones production runs on, so the generated nats-server.conf is started with the real
 * nats-server and each identity's files are used to connect the way the daemons do.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openEventBus } from '../../src/events/open-bus.js'
import { createLogger } from '../../src/log.js'
import { nodeplane, tempDir } from '../helpers/cli.js'
import { natsServerBinary } from '../helpers/nats.js'
import { freePort, waitFor } from '../helpers/ports.js'

interface Identity {
  name: string
  cert_file: string
  key_file: string
  nkey_seed_file: string
  public_key: string
}
interface CertsNatsResult {
  dir: string
  server_config_file: string
  ca_file: string
  server_cert_file: string
  server_key_file: string
  encryption_key_file: string
  identities: Identity[]
}

const logger = createLogger({ level: 'silent' })
const mode = (file: string) => fs.statSync(file).mode & 0o777

describe('nodeplane certs nats and systemd generate --nats-dir', () => {
  let cwd: string
  let out: CertsNatsResult
  let port: number
  let server: ChildProcess | undefined

  beforeAll(async () => {
    cwd = fs.realpathSync(tempDir('nodeplane-nats-certs-'))
    port = await freePort()
    const result = await nodeplane(['certs', 'nats', '--dir', path.join(cwd, 'nats'), '--port', String(port), '--store-dir', path.join(cwd, 'store'), '--json'], { cwd })
    expect(result.exitCode, result.stderr).toBe(0)
    out = JSON.parse(result.stdout) as CertsNatsResult
  })
  afterAll(async () => {
    const proc = server
    if (proc && proc.exitCode === null) {
      const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()))
      proc.kill('SIGTERM')
      await exited
    }
    if (cwd) fs.rmSync(cwd, { recursive: true, force: true })
  })

  it('writes the CA, server files, per identity a certificate, key and nkey seed, the encryption key and the server configuration; secrets 0600', () => {
    const dir = path.join(cwd, 'nats')
    expect(out.dir).toBe(dir)
    expect(out.identities.map((i) => i.name)).toEqual(['payment-service', 'control-plane', 'operator'])
    for (const i of out.identities) {
      expect(i.public_key).toMatch(/^U[A-Z2-7]{55}$/)
      expect(fs.readFileSync(i.nkey_seed_file, 'utf8')).toMatch(/^SU[A-Z2-7]{56}\n$/)
      expect(mode(i.nkey_seed_file)).toBe(0o600)
      expect(mode(i.key_file)).toBe(0o600)
    }
    expect(mode(out.server_key_file)).toBe(0o600)
    expect(mode(out.encryption_key_file)).toBe(0o600)
    const config = fs.readFileSync(out.server_config_file, 'utf8')
    expect(config).toContain('verify: true')
    expect(config).toContain('cipher: chachapoly')
    expect(config).toContain(`port: ${port}`)
    // The secrets never appear in the configuration nor in the command's output.
    const key = fs.readFileSync(out.encryption_key_file, 'utf8')
    expect(config).not.toContain(key.trim())
    for (const i of out.identities) expect(JSON.stringify(out)).not.toContain(fs.readFileSync(i.nkey_seed_file, 'utf8').trim())
  })

  it('keeps existing keys and seeds when run again (the encryption key above all)', async () => {
    const key = fs.readFileSync(out.encryption_key_file, 'utf8')
    const again = await nodeplane(['certs', 'nats', '--dir', out.dir, '--port', String(port), '--store-dir', path.join(cwd, 'store'), '--json'], { cwd })
    expect(again.exitCode, again.stderr).toBe(0)
    const second = JSON.parse(again.stdout) as CertsNatsResult
    expect(second.identities.map((i) => i.public_key)).toEqual(out.identities.map((i) => i.public_key))
    expect(fs.readFileSync(out.encryption_key_file, 'utf8')).toBe(key)
  })

  it('refuses a malformed --listen with a non-zero exit and one line', async () => {
    const bad = await nodeplane(['certs', 'nats', '--dir', path.join(cwd, 'bad'), '--listen', 'a b'], { cwd })
    expect(bad.exitCode).toBe(2)
    expect(bad.stderr.trim().split('\n')[0]).toMatch(/--listen "a b" is not a host name or IP address/)
    expect(fs.existsSync(path.join(cwd, 'bad'))).toBe(false)
  })

  it('gives a nats-server that starts encrypted, admits each service with its files and lets only the payment service publish payment events', async () => {
    const logFile = path.join(cwd, 'nats-server.log')
    server = spawn(natsServerBinary(), ['-c', out.server_config_file, '-l', logFile], { stdio: 'ignore' })
    await waitFor(async () => fs.existsSync(logFile) && fs.readFileSync(logFile, 'utf8').includes('Server is ready'), 'nats-server to start')
    expect(fs.readFileSync(logFile, 'utf8')).toContain('ChaCha20-Poly1305')
    const files = (name: string) => {
      const i = out.identities.find((x) => x.name === name) as Identity
      return { NATS_URL: `nats://127.0.0.1:${port}`, NATS_CA_FILE: out.ca_file, NATS_CERT_FILE: i.cert_file, NATS_KEY_FILE: i.key_file, NATS_NKEY_SEED_FILE: i.nkey_seed_file }
    }
    const payments = await openEventBus({ settings: files('payment-service'), service: 'payment-service', singleProcess: false, logger, name: 'payment-service' })
    const control = await openEventBus({ settings: files('control-plane'), service: 'control-plane', singleProcess: false, logger, name: 'orchestrator' })
    try {
      await payments.publish({ subject: 'payment.completed', data: new TextEncoder().encode('{}'), messageId: 'certs-nats-1' })
      await expect(control.publish({ subject: 'payment.completed', data: new TextEncoder().encode('{}'), messageId: 'certs-nats-2' })).rejects.toThrow(/permission/i)
    } finally {
      await control.close()
      await payments.close()
    }
  })

  it('wires each NATS-using unit to its service files with LoadCredential=, the auth-server to none', async () => {
    const units = path.join(cwd, 'units')
    const result = await nodeplane(['systemd', 'generate', '--out', units, '--bin', '/opt/nodeplane/bin/run.js', '--nats-dir', out.dir, '--json'], { cwd })
    expect(result.exitCode, result.stderr).toBe(0)
    const unit = (daemon: string) => fs.readFileSync(path.join(units, `nodeplane-${daemon}.service`), 'utf8')
    const payment = unit('payment-service')
    expect(payment).toContain(`\nLoadCredential=nats.nk:${path.join(out.dir, 'payment-service.nk')}\n`)
    expect(payment).toContain(`\nLoadCredential=nats-cert.pem:${path.join(out.dir, 'client-payment-service.pem')}\n`)
    expect(payment).toContain('\nEnvironment=NATS_NKEY_SEED_FILE=%d/nats.nk\n')
    expect(payment).not.toContain('control-plane.nk')
    for (const daemon of ['api-server', 'orchestrator', 'health-evaluator', 'agent-gateway']) {
      const content = unit(daemon)
      expect(content).toContain(`\nLoadCredential=nats.nk:${path.join(out.dir, 'control-plane.nk')}\n`)
      expect(content).toContain(`\nLoadCredential=nats-ca.pem:${out.ca_file}\n`)
      expect(content).toContain('\nEnvironment=NATS_CA_FILE=%d/nats-ca.pem\n')
      expect(content).not.toContain('payment-service.nk')
    }
    expect(unit('auth-server')).not.toContain('LoadCredential=')
    // A relative directory is refused before anything is written.
    const bad = await nodeplane(['systemd', 'generate', '--out', path.join(cwd, 'bad-units'), '--bin', '/opt/nodeplane/bin/run.js', '--nats-dir', 'relative/nats'], { cwd })
    expect(bad.exitCode).not.toBe(0)
    expect(bad.stderr).toMatch(/--nats-dir must be an absolute path/)
    expect(fs.existsSync(path.join(cwd, 'bad-units'))).toBe(false)
  })
})
