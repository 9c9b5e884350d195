import { describe, expect, it } from 'vitest'
import { ValidationError } from '../../../src/errors.js'
import { CONTROL_PLANE_DAEMONS, generateSystemdUnits, parseDaemons, parseInstances, type GeneratedFile } from '../../../src/deploy/systemd.js'

/** A unit file as section -> key -> values (keys may repeat, e.g. EnvironmentFile=). */
function parseUnit(content: string): Record<string, Record<string, string[]>> {
  const sections: Record<string, Record<string, string[]>> = {}
  let current: Record<string, string[]> | undefined
  for (const line of content.split('\n')) {
    if (line.startsWith('#') || line.trim() === '') continue
    const header = /^\[(\w+)\]$/.exec(line)
    if (header) {
      current = sections[header[1] as string] = {}
      continue
    }
    const eq = line.indexOf('=')
    expect(eq, line).toBeGreaterThan(0)
    expect(current, `${line} outside a section`).toBeDefined()
    const key = line.slice(0, eq)
    ;(current![key] ??= []).push(line.slice(eq + 1))
  }
  return sections
}

const BIN = '/opt/nodeplane/bin/run.js'
const byName = (files: GeneratedFile[], name: string) => {
  const file = files.find((f) => f.name === name)
  expect(file, name).toBeDefined()
  return parseUnit(file!.content)
}

describe('generateSystemdUnits', () => {
  const files = generateSystemdUnits({ bin: BIN })

  it('writes one service per control-plane daemon, the migration unit and the target, nothing else', () => {
    expect(files.map((f) => f.name)).toEqual([
      'nodeplane-migrate.service',
      ...CONTROL_PLANE_DAEMONS.map((d) => `nodeplane-${d}.service`),
      'nodeplane.target',
    ])
    expect(files.map((f) => f.name)).not.toContain('nodeplane-node-agent.service')
    expect(files.every((f) => f.kind === 'unit')).toBe(true)
  })

  it.each(CONTROL_PLANE_DAEMONS)('nodeplane-%s.service: notify (READY=1 through systemd-notify), restarts on failure but not on 78, stops cleanly on SIGTERM, hardened', (daemon) => {
    const unit = byName(files, `nodeplane-${daemon}.service`)
    expect(unit.Unit?.Requires).toEqual(['nodeplane-migrate.service'])
    expect(unit.Unit?.After?.[0]?.split(' ')).toContain('nodeplane-migrate.service')
    expect(unit.Unit?.PartOf).toEqual(['nodeplane.target'])
    const s = unit.Service!
    expect(s.Type).toEqual(['notify'])
    // systemd-notify sends from its own pid, which NotifyAccess=main would drop.
    expect(s.NotifyAccess).toEqual(['all'])
    expect(s.TimeoutStartSec).toEqual(['90s'])
    expect(s.ExecStart).toEqual([`${BIN} daemon ${daemon}`])
    expect(s.Restart).toEqual(['on-failure'])
    expect(s.RestartSec).toEqual(['5s'])
    expect(s.RestartPreventExitStatus).toEqual(['78'])
    expect(s.KillSignal).toEqual(['SIGTERM'])
    expect(s.SuccessExitStatus).toEqual(['143'])
    // Local hosts' agents (detached children of the orchestrator) survive its restart.
    expect(s.KillMode).toEqual([daemon === 'orchestrator' ? 'process' : 'mixed'])
    expect(s.TimeoutStopSec).toEqual(['30s'])
    expect(s.EnvironmentFile).toEqual(['/etc/nodeplane/nodeplane.env'])
    expect(s.User).toEqual(['nodeplane'])
    expect(s.Group).toEqual(['nodeplane'])
    // NATS (docs/events.md, "Security"): the service's own files, copied by systemd for this unit.
    const identity = daemon === 'payment-service' ? 'payment-service' : 'control-plane'
    const natsEnv = ['NATS_CA_FILE=%d/nats-ca.pem', 'NATS_CERT_FILE=%d/nats-cert.pem', 'NATS_KEY_FILE=%d/nats-key.pem', 'NATS_NKEY_SEED_FILE=%d/nats.nk']
    expect(s.Environment).toEqual(['NODEPLANE_DATA_DIR=/var/lib/nodeplane', ...(daemon === 'auth-server' ? [] : natsEnv)])
    expect(s.LoadCredential ?? []).toEqual(
      daemon === 'auth-server'
        ? []
        : [
            'nats-ca.pem:/etc/nodeplane/nats/ca.pem',
            `nats-cert.pem:/etc/nodeplane/nats/client-${identity}.pem`,
            `nats-key.pem:/etc/nodeplane/nats/client-${identity}-key.pem`,
            `nats.nk:/etc/nodeplane/nats/${identity}.nk`,
          ],
    )
    expect(s.WorkingDirectory).toEqual(['/var/lib/nodeplane'])
    expect(s.StateDirectory).toEqual(['nodeplane'])
    expect(s.ReadWritePaths).toEqual(['/var/lib/nodeplane'])
    for (const [key, value] of Object.entries({
      NoNewPrivileges: 'yes', ProtectSystem: 'strict', ProtectHome: 'yes', PrivateTmp: 'yes', ProtectKernelTunables: 'yes',
      ProtectControlGroups: 'yes', RestrictSUIDSGID: 'yes', LockPersonality: 'yes', CapabilityBoundingSet: '', AmbientCapabilities: '',
    })) expect(s[key], key).toEqual([value])
    // V8's JIT needs writable executable memory.
    expect(s.MemoryDenyWriteExecute).toBeUndefined()
    expect(unit.Install?.WantedBy).toEqual(['nodeplane.target'])
  })

  it('the migration unit is a one-shot db migrate of both databases that stays active', () => {
    const unit = byName(files, 'nodeplane-migrate.service')
    expect(unit.Service?.Type).toEqual(['oneshot'])
    expect(unit.Service?.RemainAfterExit).toEqual(['yes'])
    expect(unit.Service?.ExecStart).toEqual([`${BIN} db migrate --database all`])
    expect(unit.Service?.User).toEqual(['nodeplane'])
    expect(unit.Service?.EnvironmentFile).toEqual(['/etc/nodeplane/nodeplane.env'])
    expect(unit.Service?.Restart).toBeUndefined()
  })

  it('the target wants the migration and every daemon', () => {
    const unit = byName(files, 'nodeplane.target')
    expect(unit.Unit?.Wants?.[0]?.split(' ')).toEqual(['nodeplane-migrate.service', ...CONTROL_PLANE_DAEMONS.map((d) => `nodeplane-${d}.service`)])
    expect(unit.Install?.WantedBy).toEqual(['multi-user.target'])
  })

  it('takes the env file, user, group, data dir, stop timeout and a subset of daemons', () => {
    const custom = generateSystemdUnits({ bin: '/usr/local/bin/nodeplane', envFile: '/srv/np/env', user: 'np', group: 'npgroup', dataDir: '/srv/np/data', daemons: ['orchestrator,api-server'], stopTimeoutSeconds: 60 })
    expect(custom.map((f) => f.name)).toEqual(['nodeplane-migrate.service', 'nodeplane-api-server.service', 'nodeplane-orchestrator.service', 'nodeplane.target'])
    const s = byName(custom, 'nodeplane-orchestrator.service').Service!
    expect(s.ExecStart).toEqual(['/usr/local/bin/nodeplane daemon orchestrator'])
    expect(s.EnvironmentFile).toEqual(['/srv/np/env'])
    expect(s.User).toEqual(['np'])
    expect(s.Group).toEqual(['npgroup'])
    expect(s.WorkingDirectory).toEqual(['/srv/np/data'])
    expect(s.ReadWritePaths).toEqual(['/srv/np/data'])
    // Outside /var/lib systemd cannot create it: no StateDirectory=.
    expect(s.StateDirectory).toBeUndefined()
    expect(s.TimeoutStopSec).toEqual(['60s'])
    expect(byName(custom, 'nodeplane.target').Unit?.Wants).toEqual(['nodeplane-migrate.service nodeplane-api-server.service nodeplane-orchestrator.service'])
  })

  it('--instances: a template per daemon, instance env files with ports that never collide, the target wants each instance', () => {
    const many = generateSystemdUnits({ bin: BIN, instances: { 'api-server': 3, orchestrator: 2, 'payment-service': 2, 'rpc-gateway': 2 } })
    const names = many.map((f) => f.name)
    expect(names).toContain('nodeplane-api-server@.service')
    expect(names).not.toContain('nodeplane-api-server.service')
    expect(names).toContain('nodeplane-orchestrator@.service')
    const api = byName(many, 'nodeplane-api-server@.service').Service!
    expect(api.EnvironmentFile).toEqual(['/etc/nodeplane/nodeplane.env', '/etc/nodeplane/nodeplane-api-server@%i.env'])
    // No port: the instance file is optional.
    expect(byName(many, 'nodeplane-orchestrator@.service').Service?.EnvironmentFile?.[1]).toBe('-/etc/nodeplane/nodeplane-orchestrator@%i.env')
    const env = many.filter((f) => f.kind === 'env')
    expect(env.map((f) => f.name)).toEqual(['nodeplane-api-server@1.env', 'nodeplane-api-server@2.env', 'nodeplane-api-server@3.env', 'nodeplane-payment-service@1.env', 'nodeplane-payment-service@2.env', 'nodeplane-rpc-gateway@1.env', 'nodeplane-rpc-gateway@2.env'])
    expect(env[0]?.content).toContain('API_SERVER_PORT=8080\n')
    expect(env[2]?.content).toContain('API_SERVER_PORT=8280\n')
    expect(env[4]?.content).toContain('PAYMENT_GRPC_PORT=50151\nPAYMENT_HTTP_PORT=8185\nPAYMENT_METRICS_PORT=9186\n')
    // Gateways behind a load balancer, two on one host: 8545 and 8645.
    expect(env[6]?.content).toContain('RPC_GATEWAY_PORT=8645\n')
    const ports = [...env.flatMap((f) => [...f.content.matchAll(/=(\d+)$/gm)].map((m) => m[1])), '8081', '9090']
    expect(new Set(ports).size).toBe(ports.length)
    const wants = byName(many, 'nodeplane.target').Unit?.Wants?.[0]?.split(' ')
    expect(wants).toEqual(expect.arrayContaining(['nodeplane-api-server@1.service', 'nodeplane-api-server@3.service', 'nodeplane-orchestrator@2.service', 'nodeplane-auth-server.service']))
    expect(wants).not.toContain('nodeplane-api-server@.service')
  })

  it('refuses what a unit file could not hold or should not run', () => {
    const bad: Array<Parameters<typeof generateSystemdUnits>[0]> = [
      { bin: 'bin/run.js' },
      { bin: '/opt/node plane/run.js' },
      { bin: '/opt/100%/run.js' },
      { bin: BIN, envFile: 'nodeplane.env' },
      { bin: BIN, dataDir: '/' },
      { bin: BIN, user: 'root' },
      { bin: BIN, user: 'Bad User' },
      { bin: BIN, daemons: ['node-agent'] },
      { bin: BIN, daemons: ['api-server'], instances: { orchestrator: 2 } },
      { bin: BIN, stopTimeoutSeconds: 0 },
    ]
    for (const options of bad) expect(() => generateSystemdUnits(options), JSON.stringify(options)).toThrow(ValidationError)
  })
})

describe('flag parsing', () => {
  it('parses --instances and --daemons, comma-separated or repeated', () => {
    expect(parseInstances(['api-server=2,orchestrator=3', 'agent-gateway=1'])).toEqual({ 'api-server': 2, orchestrator: 3, 'agent-gateway': 1 })
    for (const bad of ['api-server', 'api-server=0', 'api-server=51', '=2', 'api-server=two']) expect(() => parseInstances([bad]), bad).toThrow(ValidationError)
    expect(parseDaemons(undefined)).toEqual([...CONTROL_PLANE_DAEMONS])
    expect(parseDaemons(['health-evaluator', 'api-server'])).toEqual(['api-server', 'health-evaluator'])
    expect(() => parseDaemons(['api-server,nope'])).toThrow(/unknown daemon "nope"/)
  })
})
