import fs from 'node:fs'
import path from 'node:path'
import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import {
  CONTROL_PLANE_DAEMONS,
  DEFAULT_DATA_DIR,
  DEFAULT_ENV_FILE,
  DEFAULT_NATS_DIR,
  DEFAULT_SECRETS_DIR,
  DEFAULT_STOP_TIMEOUT_SECONDS,
  DEFAULT_USER,
  generateSystemdUnits,
  parseInstances,
} from '../../src/deploy/systemd.js'
import { ConflictError, ValidationError } from '../../src/errors.js'

interface SystemdGenerateResult {
  out: string
  units: Array<{ name: string; path: string }>
  env_files: Array<{ name: string; path: string }>
  warnings: string[]
}

export default class SystemdGenerate extends BaseCommand<typeof SystemdGenerate> {
  static override summary = 'Write systemd units for the control-plane daemons, the one-shot migration and nodeplane.target'
  static override description =
    'Writes nodeplane-<daemon>.service for each control-plane daemon (Type=simple, Restart=on-failure, an EnvironmentFile, a dedicated user, hardening), nodeplane-migrate.service (`db migrate --database all`, which every daemon requires and starts after) and nodeplane.target, which wants them all. --instances DAEMON=N writes a template nodeplane-<daemon>@.service instead, plus one env file per instance with its ports, to copy beside --environment-file. Existing files are never overwritten without --force (exit 4). docs/deploy.md walks through a whole deployment.'
  static override examples = [
    'sudo <%= config.bin %> systemd generate --out /etc/systemd/system',
    '<%= config.bin %> systemd generate --out ./units --bin /opt/nodeplane/bin/run.js --environment-file /etc/nodeplane/nodeplane.env --user nodeplane --json',
    '<%= config.bin %> systemd generate --out ./units --daemons api-server,orchestrator --instances api-server=2,orchestrator=2',
    '<%= config.bin %> systemd generate --out ./units --secret DATABASE_URL,PAYMENTS_DATABASE_URL,CARD_PROVIDER_SECRET_KEY,CARD_PROVIDER_WEBHOOK_SECRET,AUTH_IDP_WEBHOOK_SIGNING_SECRET,SECRETS_MASTER_KEY_FILE',
    '<%= config.bin %> systemd generate --out ./units --vault   # VAULT_ADDR and vault: references in the environment file',
  ]
  static override baseFlags = {
    ...BaseCommand.baseFlags,
    'data-dir': Flags.string({
      description: `data directory of the daemons, absolute (default ${DEFAULT_DATA_DIR}; NODEPLANE_DATA_DIR is not read)`,
      helpGroup: 'GLOBAL',
    }),
  }
  static override flags = {
    out: Flags.string({ description: 'directory to write the units into (created if missing; required)' }),
    bin: Flags.string({ description: 'absolute path of the nodeplane executable (default: this one, symlinks resolved)' }),
    // Not --env-file: Node 20 itself claims that name anywhere on the command line (exit 9 when the file is missing).
    'environment-file': Flags.string({ description: `environment file every unit reads, EnvironmentFile= (default ${DEFAULT_ENV_FILE})` }),
    user: Flags.string({ description: `user (and group, unless --group) the daemons run as (default ${DEFAULT_USER})` }),
    group: Flags.string({ description: 'group the daemons run as (default: --user)' }),
    daemons: Flags.string({ description: `daemons to write units for, comma-separated (default all: ${CONTROL_PLANE_DAEMONS.join(',')})`, multiple: true }),
    instances: Flags.string({ description: 'DAEMON=N: run N instances of a daemon through a templated unit (repeatable or comma-separated)', multiple: true }),
    'stop-timeout': Flags.integer({ description: `seconds systemd waits after SIGTERM before SIGKILL (default ${DEFAULT_STOP_TIMEOUT_SECONDS}; keep above SHUTDOWN_TIMEOUT)`, min: 1 }),
    'nats-dir': Flags.string({ description: `directory of the NATS certificates and nkey seeds from \`nodeplane certs nats\`, handed to each unit with LoadCredential= (default ${DEFAULT_NATS_DIR})` }),
    secret: Flags.string({
      description: `a secret setting (DATABASE_URL, CARD_PROVIDER_SECRET_KEY, SECRETS_MASTER_KEY_FILE, …) handed to the units that read it with LoadCredential= from --secrets-dir, file named like the setting in kebab case (database-url); repeatable or comma-separated`,
      multiple: true,
    }),
    'secrets-dir': Flags.string({ description: `directory of the --secret files, readable by root only (default ${DEFAULT_SECRETS_DIR})` }),
    vault: Flags.boolean({ description: 'Vault is the secrets manager: every unit gets SECRETS_PROVIDER=vault and the AppRole ids (vault-role-id, vault-secret-id in --secrets-dir) as credentials', default: false }),
    force: Flags.boolean({ description: 'overwrite existing files', default: false }),
  }

  async run(): Promise<SystemdGenerateResult> {
    // Checked here rather than with `required`, so the error is one line naming the flag.
    if (!this.flags.out) throw new ValidationError('--out DIR is required: the directory to write the units into (e.g. /etc/systemd/system)')
    const bin = this.flags.bin ?? this.runningBin()
    const files = generateSystemdUnits({
      bin,
      ...(this.flags['environment-file'] ? { envFile: this.flags['environment-file'] } : {}),
      ...(this.flags.user ? { user: this.flags.user } : {}),
      ...(this.flags['nats-dir'] ? { natsDir: this.flags['nats-dir'] } : {}),
      ...(this.flags.secret ? { secrets: this.flags.secret } : {}),
      ...(this.flags['secrets-dir'] ? { secretsDir: this.flags['secrets-dir'] } : {}),
      vault: this.flags.vault,
      ...(this.flags.group ? { group: this.flags.group } : {}),
      ...(this.flags['data-dir'] ? { dataDir: this.flags['data-dir'] } : {}),
      ...(this.flags.daemons ? { daemons: this.flags.daemons } : {}),
      ...(this.flags.instances ? { instances: parseInstances(this.flags.instances) } : {}),
      ...(this.flags['stop-timeout'] !== undefined ? { stopTimeoutSeconds: this.flags['stop-timeout'] } : {}),
    })

    const out = path.resolve(this.flags.out)
    if (fs.existsSync(out) && !fs.statSync(out).isDirectory()) throw new ValidationError(`--out ${out} is not a directory`)
    const existing = files.map((f) => path.join(out, f.name)).filter((p) => fs.existsSync(p))
    if (existing.length > 0 && !this.flags.force) {
      const message = `${existing.length} file(s) already exist, first ${existing[0]}; nothing written (--force overwrites)`
      throw new ConflictError(message, message)
    }
    fs.mkdirSync(out, { recursive: true })
    for (const file of files) fs.writeFileSync(path.join(out, file.name), file.content, { mode: 0o644 })

    const warnings: string[] = []
    const resolvedBin = path.normalize(bin)
    if (/^\/(home|root|run\/user)(\/|$)/.test(resolvedBin)) {
      warnings.push(`${resolvedBin} is under a home directory, which ProtectHome=yes hides from the daemons: install nodeplane elsewhere (e.g. /opt/nodeplane) and pass --bin`)
    }
    if (!fs.existsSync(resolvedBin)) warnings.push(`${resolvedBin} does not exist on this machine`)

    const result: SystemdGenerateResult = {
      out,
      units: files.filter((f) => f.kind === 'unit').map((f) => ({ name: f.name, path: path.join(out, f.name) })),
      env_files: files.filter((f) => f.kind === 'env').map((f) => ({ name: f.name, path: path.join(out, f.name) })),
      warnings,
    }
    for (const warning of warnings) process.stderr.write(`Warning: ${warning}\n`)
    if (!this.jsonEnabled()) {
      this.log(`Wrote ${result.units.length} units to ${out}:`)
      for (const unit of result.units) this.log(`  ${unit.name}`)
      if (result.env_files.length > 0) {
        const envDir = path.dirname(this.flags['environment-file'] ?? DEFAULT_ENV_FILE)
        this.log(`and ${result.env_files.length} instance env file(s), to copy into ${envDir}:`)
        for (const file of result.env_files) this.log(`  ${file.name}`)
      }
      this.log('Then: systemctl daemon-reload && systemctl enable --now nodeplane.target (docs/deploy.md)')
    }
    return result
  }

  /** The executable running now (bin/run.js, through any npm link symlink). */
  private runningBin(): string {
    const argv1 = process.argv[1]
    if (argv1) {
      try {
        return fs.realpathSync(argv1)
      } catch {
        // fall through
      }
    }
    return path.join(this.config.root, 'bin', 'run.js')
  }
}
