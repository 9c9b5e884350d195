import fs from 'node:fs'
import path from 'node:path'
import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { databaseCommandEnv, loadConfig } from '../../src/config/env.js'
import { ValidationError } from '../../src/errors.js'
import { ensureNatsSecurityFiles, NATS_IDENTITIES, renderNatsServerConfig } from '../../src/events/nats-security.js'

interface CertsNatsResult {
  dir: string
  server_config_file: string
  ca_file: string
  server_cert_file: string
  server_key_file: string
  encryption_key_file: string
  identities: Array<{ name: string; cert_file: string; key_file: string; nkey_seed_file: string; public_key: string }>
}

export default class CertsNats extends BaseCommand<typeof CertsNats> {
  static override summary = 'Make the NATS CA, server and per-service client certificates, nkey seeds, encryption key and nats-server configuration'
  static override description =
    'Writes into --dir (default <data dir>/nats-ca): ca.pem, server.pem for --host names, per identity (payment-service, control-plane, operator) client-<name>.pem, its key and <name>.nk (the nkey seed), jetstream-key.conf (the JetStream encryption key) and nats-server.conf (mutual TLS, one nkey user per service with its permissions, streams encrypted at rest). Keys and seeds are mode 0600; existing files are kept, so the command can run again. Daemons read NATS_CA_FILE, NATS_CERT_FILE, NATS_KEY_FILE and NATS_NKEY_SEED_FILE; `nodeplane systemd generate --nats-dir` wires them. Keep jetstream-key.conf: the stored streams cannot be read without it. See docs/deploy.md.'
  static override examples = [
    '<%= config.bin %> certs nats',
    '<%= config.bin %> certs nats --dir /etc/nodeplane/nats --host nats.internal --listen 0.0.0.0 --store-dir /var/lib/nats --json',
  ]
  static override flags = {
    dir: Flags.string({ description: 'directory for the files (default <data dir>/nats-ca)' }),
    host: Flags.string({ description: 'extra host name or IP the server certificate is valid for (repeatable; a new server certificate needs the old one removed)', multiple: true }),
    listen: Flags.string({ description: 'address nats-server listens on (default 127.0.0.1)', default: '127.0.0.1' }),
    port: Flags.integer({ description: 'port nats-server listens on (default 4222)', default: 4222, min: 1, max: 65_535 }),
    'store-dir': Flags.string({ description: 'JetStream store directory (default <dir>/jetstream)' }),
  }

  async run(): Promise<CertsNatsResult> {
    const config = loadConfig(databaseCommandEnv, this.env())
    const dir = path.resolve(this.flags.dir ?? path.join(config.NODEPLANE_DATA_DIR, 'nats-ca'))
    const listen = this.flags.listen
    if (!/^[A-Za-z0-9.:-]{1,253}$/.test(listen)) throw new ValidationError(`--listen "${listen.slice(0, 80)}" is not a host name or IP address`)
    for (const host of this.flags.host ?? []) {
      if (!/^[A-Za-z0-9.:*-]{1,253}$/.test(host)) throw new ValidationError(`--host "${host.slice(0, 80)}" is not a host name or IP address`)
    }
    const files = ensureNatsSecurityFiles(dir, { hosts: ['localhost', '127.0.0.1', '::1', ...(this.flags.host ?? [])] })
    const storeDir = path.resolve(this.flags['store-dir'] ?? path.join(dir, 'jetstream'))
    const serverConfigFile = path.join(dir, 'nats-server.conf')
    const users = Object.fromEntries(NATS_IDENTITIES.map((id) => [id, files.services[id].publicKey])) as Record<(typeof NATS_IDENTITIES)[number], string>
    const serverConfig = renderNatsServerConfig({
      host: listen,
      port: this.flags.port,
      storeDir,
      tls: { certFile: files.serverCertFile, keyFile: files.serverKeyFile, caFile: files.caFile },
      users,
      encryptionKeyFile: files.encryptionKeyFile,
    })
    // Rewritten each run (it holds no secret): new flags or identities take effect.
    fs.writeFileSync(serverConfigFile, serverConfig, { mode: 0o644 })
    const result: CertsNatsResult = {
      dir,
      server_config_file: serverConfigFile,
      ca_file: files.caFile,
      server_cert_file: files.serverCertFile,
      server_key_file: files.serverKeyFile,
      encryption_key_file: files.encryptionKeyFile,
      identities: NATS_IDENTITIES.map((name) => {
        const c = files.services[name]
        return { name, cert_file: c.certFile, key_file: c.keyFile, nkey_seed_file: c.seedFile, public_key: c.publicKey }
      }),
    }
    if (!this.jsonEnabled()) {
      this.log(`NATS certificates and credentials in ${dir}:`)
      this.log(`  server config: ${serverConfigFile} (nats-server -c ${serverConfigFile})`)
      this.log(`  CA:            ${files.caFile}`)
      this.log(`  encryption:    ${files.encryptionKeyFile} (keep it: the streams cannot be read without it)`)
      for (const i of result.identities) this.log(`  ${i.name}: ${i.cert_file}, ${i.key_file}, seed ${i.nkey_seed_file}`)
    }
    return result
  }
}
