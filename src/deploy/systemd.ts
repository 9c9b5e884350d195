/**
 * systemd units for the control plane (`nodeplane systemd generate`): one service per daemon,
 * a one-shot `db migrate` every daemon requires and comes after, and `nodeplane.target` that
 * wants them all. Pure: builds the file contents; the command writes them.
 */
import path from 'node:path'
import type { z } from 'zod'
import { agentGatewayEnv, apiServerEnv, authServerEnv, databaseCommandEnv, healthEvaluatorEnv, orchestratorEnv, paymentServiceEnv, rpcGatewayEnv } from '../config/env.js'
import { SECRET_FILE_SETTINGS, SECRET_SETTINGS } from '../config/secret-settings.js'
import { ValidationError } from '../errors.js'

/** Daemons of the control-plane host (node-agent runs on node hosts). */
export const CONTROL_PLANE_DAEMONS = ['api-server', 'auth-server', 'orchestrator', 'health-evaluator', 'agent-gateway', 'payment-service', 'rpc-gateway'] as const
export type ControlPlaneDaemon = (typeof CONTROL_PLANE_DAEMONS)[number]

export const DEFAULT_ENV_FILE = '/etc/nodeplane/nodeplane.env'
export const DEFAULT_USER = 'nodeplane'
export const DEFAULT_DATA_DIR = '/var/lib/nodeplane'
/** Longer than the daemons' default SHUTDOWN_TIMEOUT (15s), so their own deadline fires first. */
export const DEFAULT_STOP_TIMEOUT_SECONDS = 30
export const RESTART_SEC = 5
/** How long systemd waits for READY=1 before it fails the start (and restarts it). */
export const START_TIMEOUT_SEC = 90
export const MAX_INSTANCES = 50

/** Exit status of a daemon stopped by SIGTERM (128 + 15; src/daemon/shutdown.ts). */
export const EXIT_SIGTERM = 143
/** Exit status of a configuration error (docs/cli.md): restarting cannot help. */
export const EXIT_CONFIG = 78

/**
 * The ports each daemon listens on, by variable and default. Instance k of a templated daemon
 * gets every port + 100 * (k - 1): the defaults all differ modulo 100, so no two instances of
 * any daemons collide.
 */
export const DAEMON_PORTS: Record<ControlPlaneDaemon, Array<{ variable: string; port: number }>> = {
  'api-server': [{ variable: 'API_SERVER_PORT', port: 8080 }],
  'auth-server': [{ variable: 'AUTH_SERVER_PORT', port: 8081 }],
  orchestrator: [],
  'health-evaluator': [],
  'agent-gateway': [{ variable: 'AGENT_GATEWAY_PORT', port: 9090 }],
  'payment-service': [
    { variable: 'PAYMENT_GRPC_PORT', port: 50051 },
    { variable: 'PAYMENT_HTTP_PORT', port: 8085 },
    { variable: 'PAYMENT_METRICS_PORT', port: 9086 },
  ],
  'rpc-gateway': [{ variable: 'RPC_GATEWAY_PORT', port: 8545 }],
}

const DESCRIPTIONS: Record<ControlPlaneDaemon, string> = {
  'api-server': 'REST API',
  'auth-server': 'auth server',
  orchestrator: 'orchestrator (workflows, payment activation)',
  'health-evaluator': 'health evaluator',
  'agent-gateway': 'agent gateway (gRPC for node agents)',
  'payment-service': 'payment service',
  'rpc-gateway': "rpc-gateway (customers' node endpoints)",
}

export interface SystemdOptions {
  /** Absolute path of the nodeplane executable (bin/run.js or a symlink to it). */
  bin: string
  envFile?: string
  user?: string
  group?: string
  dataDir?: string
  daemons?: readonly string[]
  /** Daemons run as templated units `nodeplane-<daemon>@.service`, instances 1..N. */
  instances?: Readonly<Record<string, number>>
  stopTimeoutSeconds?: number
  /**
   * Directory of the files `nodeplane certs nats` wrote (default /etc/nodeplane/nats): each
   * daemon that uses NATS gets its service's CA, client certificate, key and nkey seed through
   * LoadCredential=, readable only by that unit.
   */
  natsDir?: string
  /**
   * Secret settings whose values systemd hands over as credentials (LoadCredential=) from
   * `secretsDir`, one file per setting, each only to the units that read it (docs/deploy.md).
   */
  secrets?: readonly string[]
  secretsDir?: string
  /** Vault is the secrets manager: SECRETS_PROVIDER=vault and the AppRole ids as credentials in every unit. */
  vault?: boolean
}

export const DEFAULT_NATS_DIR = '/etc/nodeplane/nats'
export const DEFAULT_SECRETS_DIR = '/etc/nodeplane/secrets'

/** The NATS identity each daemon connects as; the auth-server does not use NATS. */
const NATS_IDENTITY: Record<ControlPlaneDaemon, 'payment-service' | 'control-plane' | null> = {
  'api-server': 'control-plane',
  'auth-server': null,
  orchestrator: 'control-plane',
  'health-evaluator': 'control-plane',
  'agent-gateway': 'control-plane',
  'payment-service': 'payment-service',
  // Follows node moves through the health events (core NATS subscription).
  'rpc-gateway': 'control-plane',
}

/** LoadCredential= lines and the NATS_* variables pointing into the unit's credentials directory (%d). */
export function natsCredentialLines(daemon: ControlPlaneDaemon, natsDir: string): string[] {
  const identity = NATS_IDENTITY[daemon]
  if (!identity) return []
  const credentials: Array<[string, string, string]> = [
    ['NATS_CA_FILE', 'nats-ca.pem', 'ca.pem'],
    ['NATS_CERT_FILE', 'nats-cert.pem', `client-${identity}.pem`],
    ['NATS_KEY_FILE', 'nats-key.pem', `client-${identity}-key.pem`],
    ['NATS_NKEY_SEED_FILE', 'nats.nk', `${identity}.nk`],
  ]
  return [
    `# NATS as ${identity}: mutual TLS and its nkey (nodeplane certs nats); systemd copies them for this unit only.`,
    ...credentials.map(([, id, file]) => `LoadCredential=${id}:${path.join(natsDir, file)}`),
    ...credentials.map(([variable, id]) => `Environment=${variable}=%d/${id}`),
  ]
}

/** The settings each unit reads (its daemon's schema), so a secret goes only where it is used. */
const UNIT_SETTINGS: Record<ControlPlaneDaemon | 'migrate', z.AnyZodObject> = {
  migrate: databaseCommandEnv,
  'api-server': apiServerEnv,
  'auth-server': authServerEnv,
  orchestrator: orchestratorEnv,
  'health-evaluator': healthEvaluatorEnv,
  'agent-gateway': agentGatewayEnv,
  'payment-service': paymentServiceEnv,
  'rpc-gateway': rpcGatewayEnv,
}

/** NATS credentials come from --nats-dir; the Vault ids from --vault (which every unit gets). */
const NOT_BY_SECRET_FLAG = new Set(['NATS_NKEY_SEED', 'NATS_KEY_FILE', 'NATS_NKEY_SEED_FILE'])
const VAULT_IDS = ['VAULT_ROLE_ID', 'VAULT_SECRET_ID']

/** The credential id and file name of a secret setting: DATABASE_URL -> database-url, AUTH_SIGNING_KEY_FILE -> auth-signing-key. */
export function credentialId(setting: string): string {
  return setting.replace(/_FILE$/, '').toLowerCase().replaceAll('_', '-')
}

export function parseSecretSettings(values: readonly string[]): string[] {
  const names = [...new Set(values.flatMap((v) => v.split(',')).map((v) => v.trim()).filter((v) => v.length > 0))]
  const known: readonly string[] = [...SECRET_SETTINGS, ...SECRET_FILE_SETTINGS]
  for (const name of names) {
    if (NOT_BY_SECRET_FLAG.has(name)) throw new ValidationError(`--secret ${name}: the NATS credentials come from --nats-dir (nodeplane certs nats)`)
    if (!known.includes(name)) {
      throw new ValidationError(`--secret ${name.slice(0, 60)}: not a secret setting; one of ${known.filter((n) => !NOT_BY_SECRET_FLAG.has(n)).join(', ')}`)
    }
  }
  return names
}

/**
 * LoadCredential= for each secret the unit reads, and the variable pointing into the unit's
 * credentials directory (%d): `<NAME>_FILE=%d/<id>` for a value, `<NAME>=%d/<id>` for a setting
 * that already names a file.
 */
export function secretCredentialLines(unit: ControlPlaneDaemon | 'migrate', secrets: readonly string[], secretsDir: string, vault: boolean): string[] {
  const reads = new Set(Object.keys(UNIT_SETTINGS[unit].shape))
  // Every schema shares both database URLs; each daemon opens only its own database.
  if (unit !== 'migrate') reads.delete(unit === 'payment-service' ? 'DATABASE_URL' : 'PAYMENTS_DATABASE_URL')
  const mine = secrets.filter((name) => reads.has(name) && !VAULT_IDS.includes(name))
  const all = vault || secrets.some((n) => VAULT_IDS.includes(n)) ? [...VAULT_IDS, ...mine] : mine
  if (all.length === 0 && !vault) return []
  return [
    `# Secrets as credentials from ${secretsDir} (docs/deploy.md): none is in the environment; systemd copies each for this unit only.`,
    ...(vault ? ['Environment=SECRETS_PROVIDER=vault'] : []),
    ...all.map((name) => `LoadCredential=${credentialId(name)}:${path.join(secretsDir, credentialId(name))}`),
    ...all.map((name) => `Environment=${name.endsWith('_FILE') ? name : `${name}_FILE`}=%d/${credentialId(name)}`),
  ]
}

export interface GeneratedFile {
  name: string
  content: string
  kind: 'unit' | 'env'
}

/** What a systemd unit file accepts unquoted: no spaces, `%` specifiers, `$` or quotes. */
const SAFE_PATH = /^\/[A-Za-z0-9._+\-/@]*$/
const SAFE_USER = /^[a-z_][a-z0-9_-]{0,31}$/

function checkPath(flag: string, value: string): string {
  if (!path.isAbsolute(value)) throw new ValidationError(`--${flag} must be an absolute path, got "${value}"`)
  if (!SAFE_PATH.test(value)) throw new ValidationError(`--${flag} "${value}" has characters a unit file would need quoted (allowed: letters, digits, . _ + - / @)`)
  return path.normalize(value)
}

/** `api-server=2,orchestrator=3` (or repeated flags) -> {api-server: 2, orchestrator: 3}. */
export function parseInstances(values: readonly string[]): Record<string, number> {
  const out: Record<string, number> = {}
  for (const item of values.flatMap((v) => v.split(',')).map((v) => v.trim()).filter((v) => v.length > 0)) {
    const match = /^([a-z-]+)=(\d+)$/.exec(item)
    if (!match) throw new ValidationError(`--instances "${item}" is not DAEMON=N (for example api-server=2)`)
    const [, daemon, count] = match as unknown as [string, string, string]
    const n = Number(count)
    if (n < 1 || n > MAX_INSTANCES) throw new ValidationError(`--instances ${daemon}=${count}: the count must be between 1 and ${MAX_INSTANCES}`)
    out[daemon] = n
  }
  return out
}

export function parseDaemons(values: readonly string[] | undefined): ControlPlaneDaemon[] {
  if (!values || values.length === 0) return [...CONTROL_PLANE_DAEMONS]
  const wanted = new Set(values.flatMap((v) => v.split(',')).map((v) => v.trim()).filter((v) => v.length > 0))
  for (const d of wanted) {
    if (!(CONTROL_PLANE_DAEMONS as readonly string[]).includes(d)) {
      const hint = d === 'node-agent' ? ' (node-agent runs on node hosts, not the control plane; docs/node-agent.md)' : ''
      throw new ValidationError(`--daemons: unknown daemon "${d}"${hint}; one of ${CONTROL_PLANE_DAEMONS.join(', ')}`)
    }
  }
  if (wanted.size === 0) throw new ValidationError('--daemons needs at least one daemon')
  return CONTROL_PLANE_DAEMONS.filter((d) => wanted.has(d))
}

export function unitName(daemon: ControlPlaneDaemon, templated: boolean): string {
  return templated ? `nodeplane-${daemon}@.service` : `nodeplane-${daemon}.service`
}

/** The env file of instance `i` of a templated daemon, beside the main env file. */
export function instanceEnvFileName(daemon: ControlPlaneDaemon, instance: number | '%i'): string {
  return `nodeplane-${daemon}@${instance}.env`
}

export function generateSystemdUnits(options: SystemdOptions): GeneratedFile[] {
  const bin = checkPath('bin', options.bin)
  const envFile = checkPath('environment-file', options.envFile ?? DEFAULT_ENV_FILE)
  const dataDir = checkPath('data-dir', options.dataDir ?? DEFAULT_DATA_DIR)
  const natsDir = checkPath('nats-dir', options.natsDir ?? DEFAULT_NATS_DIR)
  const secretsDir = checkPath('secrets-dir', options.secretsDir ?? DEFAULT_SECRETS_DIR)
  const secrets = parseSecretSettings(options.secrets ?? [])
  const vault = options.vault ?? false
  if (dataDir === '/') throw new ValidationError('--data-dir cannot be /')
  const user = options.user ?? DEFAULT_USER
  const group = options.group ?? user
  for (const [flag, value] of [['user', user], ['group', group]] as const) {
    if (!SAFE_USER.test(value)) throw new ValidationError(`--${flag} "${value}" is not a valid user or group name`)
  }
  if (user === 'root') throw new ValidationError('--user root: the daemons need no privileges; use a dedicated user (default nodeplane)')
  const stopTimeout = options.stopTimeoutSeconds ?? DEFAULT_STOP_TIMEOUT_SECONDS
  if (!Number.isInteger(stopTimeout) || stopTimeout < 1) throw new ValidationError('--stop-timeout must be a whole number of seconds, at least 1')
  const daemons = parseDaemons(options.daemons)
  const instances = options.instances ?? {}
  for (const d of Object.keys(instances)) {
    if (!(daemons as readonly string[]).includes(d)) throw new ValidationError(`--instances ${d}: not one of the generated daemons (${daemons.join(', ')})`)
  }

  // StateDirectory= makes systemd create the directory, owned by the user, when it is under /var/lib.
  const stateDirectory = dataDir.startsWith('/var/lib/') ? dataDir.slice('/var/lib/'.length) : undefined
  const envDir = path.dirname(envFile)

  const serviceCommon = (): string[] => [
    `User=${user}`,
    `Group=${group}`,
    `EnvironmentFile=${envFile}`,
    `Environment=NODEPLANE_DATA_DIR=${dataDir}`,
    `WorkingDirectory=${dataDir}`,
    ...(stateDirectory ? [`StateDirectory=${stateDirectory}`, 'StateDirectoryMode=0700'] : []),
    'UMask=0077',
  ]
  const hardening = (): string[] => [
    '# Hardening (systemd.exec(5)). Not MemoryDenyWriteExecute: V8 needs writable executable memory.',
    'NoNewPrivileges=yes',
    'ProtectSystem=strict',
    'ProtectHome=yes',
    'PrivateTmp=yes',
    'PrivateDevices=yes',
    `ReadWritePaths=${dataDir}`,
    'ProtectKernelTunables=yes',
    'ProtectKernelModules=yes',
    'ProtectKernelLogs=yes',
    'ProtectControlGroups=yes',
    'ProtectClock=yes',
    'ProtectHostname=yes',
    'RestrictSUIDSGID=yes',
    'RestrictRealtime=yes',
    'RestrictNamespaces=yes',
    'LockPersonality=yes',
    'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK',
    'CapabilityBoundingSet=',
    'AmbientCapabilities=',
  ]
  const dependencies = [
    'Requires=nodeplane-migrate.service',
    // Ordering only: harmless when PostgreSQL or NATS run on other hosts.
    'After=nodeplane-migrate.service network-online.target postgresql.service nats-server.service',
    'Wants=network-online.target',
    'PartOf=nodeplane.target',
  ]

  const files: GeneratedFile[] = []
  const header = '# Generated by `nodeplane systemd generate` (docs/deploy.md). Regenerate rather than edit;\n# put local changes in a drop-in: systemctl edit <unit>.\n'

  files.push({
    name: 'nodeplane-migrate.service',
    kind: 'unit',
    content: render(header, {
      Unit: [
        'Description=nodeplane: apply database migrations (control plane and payments)',
        'After=network-online.target postgresql.service',
        'Wants=network-online.target',
        'PartOf=nodeplane.target',
      ],
      Service: [
        'Type=oneshot',
        'RemainAfterExit=yes',
        ...serviceCommon(),
        ...secretCredentialLines('migrate', secrets, secretsDir, vault),
        `ExecStart=${bin} db migrate --database all`,
        'TimeoutStartSec=30min',
        ...hardening(),
      ],
      Install: ['WantedBy=nodeplane.target'],
    }),
  })

  const wants: string[] = ['nodeplane-migrate.service']
  for (const daemon of daemons) {
    const count = instances[daemon]
    const templated = count !== undefined
    const name = unitName(daemon, templated)
    const instanceEnv: string[] = []
    if (templated) {
      const ports = DAEMON_PORTS[daemon]
      // Daemons with ports need the instance's file (a missing one fails loudly at start);
      // the others may have one for per-instance settings.
      instanceEnv.push(`EnvironmentFile=${ports.length > 0 ? '' : '-'}${path.join(envDir, instanceEnvFileName(daemon, '%i'))}`)
      for (let i = 1; i <= count; i++) {
        wants.push(`nodeplane-${daemon}@${i}.service`)
        if (ports.length > 0) {
          files.push({
            name: instanceEnvFileName(daemon, i),
            kind: 'env',
            content:
              `# Instance ${i} of ${daemon}: its ports (read after ${envFile}, so these win).\n` +
              ports.map((p) => `${p.variable}=${p.port + 100 * (i - 1)}\n`).join(''),
          })
        }
      }
    } else {
      wants.push(name)
    }
    const common = serviceCommon()
    common.splice(3, 0, ...instanceEnv) // after the shared EnvironmentFile=, so the instance's values win
    files.push({
      name,
      kind: 'unit',
      content: render(header, {
        Unit: [`Description=nodeplane ${DESCRIPTIONS[daemon]}${templated ? ' (instance %i)' : ''}`, ...dependencies, 'StartLimitIntervalSec=0'],
        Service: [
          '# READY=1 once the daemon serves (its ports accept connections), STOPPING=1 on SIGTERM: After= means ready.',
          '# Sent through systemd-notify (Node.js has no unix datagram sockets), from its own pid: hence NotifyAccess=all.',
          'Type=notify',
          'NotifyAccess=all',
          '# Migrations run in nodeplane-migrate.service; a start only opens pools, keys and listeners.',
          `TimeoutStartSec=${START_TIMEOUT_SEC}s`,
          ...common,
          ...natsCredentialLines(daemon, natsDir),
          ...secretCredentialLines(daemon, secrets, secretsDir, vault),
          `ExecStart=${bin} daemon ${daemon}`,
          'Restart=on-failure',
          `RestartSec=${RESTART_SEC}s`,
          `# Exit ${EXIT_CONFIG} is a configuration error: restarting cannot help.`,
          `RestartPreventExitStatus=${EXIT_CONFIG}`,
          '# SIGTERM starts a graceful stop (SHUTDOWN_TIMEOUT); the daemon then exits 143.',
          'KillSignal=SIGTERM',
          ...(daemon === 'orchestrator'
            ? [
                '# The local infrastructure provider starts node agents as detached processes in this',
                '# unit\'s cgroup; like under `nodeplane up`, they outlive an orchestrator restart.',
                'KillMode=process',
              ]
            : ['KillMode=mixed']),
          `SuccessExitStatus=${EXIT_SIGTERM}`,
          `TimeoutStopSec=${stopTimeout}s`,
          ...hardening(),
        ],
        Install: ['WantedBy=nodeplane.target'],
      }),
    })
  }

  files.push({
    name: 'nodeplane.target',
    kind: 'unit',
    content: render(header, {
      Unit: [
        'Description=nodeplane control plane (every daemon on this host)',
        `Wants=${wants.join(' ')}`,
        'After=network-online.target',
      ],
      Install: ['WantedBy=multi-user.target'],
    }),
  })
  return files
}

function render(header: string, sections: Record<string, string[]>): string {
  return (
    header +
    Object.entries(sections)
      .map(([section, lines]) => `\n[${section}]\n${lines.join('\n')}\n`)
      .join('')
  )
}
