import path from 'node:path'
import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { databaseCommandEnv, loadConfig } from '../../src/config/env.js'
import { CONTROL_PLANE_CLIENT_NAME, ensurePaymentDevCertificates, paymentsCaDir } from '../../src/payments/tls.js'

interface CertsDevResult {
  dir: string
  ca_file: string
  server_cert_file: string
  server_key_file: string
  clients: Array<{ name: string; cert_file: string; key_file: string }>
}

export default class CertsDev extends BaseCommand<typeof CertsDev> {
  static override summary = 'Make a development CA and the payment service / control plane certificates for mutual TLS'
  static override description =
    'Writes ca.pem, server.pem (common name nodeplane-payment-service, for localhost and 127.0.0.1) and one client certificate per --client (default nodeplane-control-plane, the default PAYMENT_ALLOWED_CLIENTS) into --dir (default <data dir>/payments-ca). Keys are mode 0600. Existing files are kept, so running it again only adds missing clients. `nodeplane up` and a payment service without PAYMENT_TLS_* files use this set. For development only: production uses certificates from its own PKI.'
  static override examples = [
    '<%= config.bin %> certs dev',
    '<%= config.bin %> certs dev --client nodeplane-control-plane --client billing-reports --json',
  ]
  static override flags = {
    dir: Flags.string({ description: 'directory for the files (default <data dir>/payments-ca)' }),
    client: Flags.string({ description: 'common name of a client certificate to make (repeatable)', multiple: true }),
    host: Flags.string({ description: 'extra host name or IP the server certificate is valid for (repeatable; a new server certificate needs the old one removed)', multiple: true }),
  }

  async run(): Promise<CertsDevResult> {
    const config = loadConfig(databaseCommandEnv, this.env())
    const dir = path.resolve(this.flags.dir ?? paymentsCaDir(config.NODEPLANE_DATA_DIR))
    const files = ensurePaymentDevCertificates(dir, {
      clients: this.flags.client && this.flags.client.length > 0 ? this.flags.client : [CONTROL_PLANE_CLIENT_NAME],
      hosts: ['localhost', '127.0.0.1', '::1', ...(this.flags.host ?? [])],
    })
    const result: CertsDevResult = {
      dir: files.dir,
      ca_file: files.caFile,
      server_cert_file: files.serverCertFile,
      server_key_file: files.serverKeyFile,
      clients: files.clients.map((c) => ({ name: c.name, cert_file: c.certFile, key_file: c.keyFile })),
    }
    if (!this.jsonEnabled()) {
      this.log(`Development certificates in ${result.dir}:`)
      this.log(`  CA:      ${result.ca_file}`)
      this.log(`  server:  ${result.server_cert_file} (key ${result.server_key_file})`)
      for (const c of result.clients) this.log(`  client ${c.name}: ${c.cert_file} (key ${c.key_file})`)
    }
    return result
  }
}
