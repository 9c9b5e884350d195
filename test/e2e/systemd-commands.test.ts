import fs from 'node:fs'
import path from 'node:path'
import { execa } from 'execa'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { BIN, nodeplane, tempDir } from '../helpers/cli.js'

interface GenerateResult {
  out: string
  units: Array<{ name: string; path: string }>
  env_files: Array<{ name: string; path: string }>
  warnings: string[]
}

const DAEMONS = ['api-server', 'auth-server', 'orchestrator', 'health-evaluator', 'agent-gateway', 'payment-service', 'rpc-gateway']

/** systemd-analyze when this machine has it (it verifies unit files without a running systemd). */
const systemdAnalyze = ['/usr/bin/systemd-analyze', '/bin/systemd-analyze'].find((p) => fs.existsSync(p))

async function verify(files: string[]): Promise<{ exitCode: number; output: string }> {
  const result = await execa(systemdAnalyze as string, ['verify', ...files], { reject: false, all: true, env: { SYSTEMD_LOG_LEVEL: 'notice' } })
  return { exitCode: result.exitCode ?? -1, output: String(result.all) }
}

describe('nodeplane systemd generate', () => {
  let cwd: string

  beforeAll(() => {
    cwd = fs.realpathSync(tempDir('nodeplane-systemd-'))
  })
  afterAll(() => {
    if (cwd) fs.rmSync(cwd, { recursive: true, force: true })
  })

  it('writes a unit per daemon, the migration unit and the target, running this very binary; systemd accepts them', async () => {
    const out = path.join(cwd, 'units')
    const result = await nodeplane(['systemd', 'generate', '--out', out, '--json'], { cwd })
    expect(result.exitCode, result.stderr).toBe(0)
    const report = JSON.parse(result.stdout) as GenerateResult
    expect(report.out).toBe(out)
    const names = ['nodeplane-migrate.service', ...DAEMONS.map((d) => `nodeplane-${d}.service`), 'nodeplane.target']
    expect(report.units).toEqual(names.map((name) => ({ name, path: path.join(out, name) })))
    expect(fs.readdirSync(out).sort()).toEqual([...names].sort())

    const bin = fs.realpathSync(BIN)
    const api = fs.readFileSync(path.join(out, 'nodeplane-api-server.service'), 'utf8')
    expect(api).toContain(`\nExecStart=${bin} daemon api-server\n`)
    for (const line of ['Type=notify', 'NotifyAccess=all', 'Restart=on-failure', 'RestartPreventExitStatus=78', 'SuccessExitStatus=143', 'KillSignal=SIGTERM', 'Requires=nodeplane-migrate.service', 'EnvironmentFile=/etc/nodeplane/nodeplane.env', 'User=nodeplane', 'NoNewPrivileges=yes', 'ProtectSystem=strict', 'ReadWritePaths=/var/lib/nodeplane']) {
      expect(api).toContain(`\n${line}\n`)
    }
    const migrate = fs.readFileSync(path.join(out, 'nodeplane-migrate.service'), 'utf8')
    expect(migrate).toContain(`\nExecStart=${bin} db migrate --database all\n`)
    expect(migrate).toContain('\nType=oneshot\n')
    expect(fs.readFileSync(path.join(out, 'nodeplane.target'), 'utf8')).toContain(`\nWants=${names.slice(0, -1).join(' ')}\n`)

    if (systemdAnalyze) {
      const verified = await verify(report.units.map((u) => u.path))
      expect(verified.exitCode, verified.output).toBe(0)
      // Unknown keys or bad values are only warnings: none may name our files.
      expect(verified.output.split('\n').filter((l) => l.includes('nodeplane'))).toEqual([])
    }
  })

  it('refuses to overwrite existing files (exit 4, one line, nothing written) unless --force', async () => {
    const out = path.join(cwd, 'again')
    expect((await nodeplane(['systemd', 'generate', '--out', out], { cwd })).exitCode).toBe(0)
    const target = path.join(out, 'nodeplane.target')
    fs.writeFileSync(target, '# edited by hand\n')
    fs.rmSync(path.join(out, 'nodeplane-orchestrator.service'))

    const refused = await nodeplane(['systemd', 'generate', '--out', out], { cwd })
    expect(refused.exitCode).toBe(4)
    expect(refused.stderr.trim().split('\n')).toHaveLength(1)
    // The eight units but the removed orchestrator's: the migration, six daemons, the target.
    expect(refused.stderr).toMatch(/^Error: 8 file\(s\) already exist.*--force/)
    expect(fs.readFileSync(target, 'utf8')).toBe('# edited by hand\n')
    expect(fs.existsSync(path.join(out, 'nodeplane-orchestrator.service'))).toBe(false)

    const json = await nodeplane(['systemd', 'generate', '--out', out, '--json'], { cwd })
    expect(json.exitCode).toBe(4)
    expect((JSON.parse(json.stdout) as { error: { exit_code: number } }).error.exit_code).toBe(4)

    const forced = await nodeplane(['systemd', 'generate', '--out', out, '--force'], { cwd })
    expect(forced.exitCode, forced.stderr).toBe(0)
    expect(fs.readFileSync(target, 'utf8')).toContain('Wants=nodeplane-migrate.service')
    expect(fs.existsSync(path.join(out, 'nodeplane-orchestrator.service'))).toBe(true)
  })

  it('takes a subset, custom paths and several instances; systemd accepts the instances', async () => {
    const out = path.join(cwd, 'custom')
    const bin = fs.realpathSync(BIN)
    const result = await nodeplane(
      ['systemd', 'generate', '--out', out, '--bin', bin, '--environment-file', '/etc/np/np.env', '--user', 'np', '--data-dir', '/srv/np',
        '--daemons', 'api-server,orchestrator', '--instances', 'api-server=2', '--instances', 'orchestrator=2', '--json'],
      { cwd },
    )
    expect(result.exitCode, result.stderr).toBe(0)
    const report = JSON.parse(result.stdout) as GenerateResult
    expect(report.units.map((u) => u.name)).toEqual(['nodeplane-migrate.service', 'nodeplane-api-server@.service', 'nodeplane-orchestrator@.service', 'nodeplane.target'])
    expect(report.env_files.map((f) => f.name)).toEqual(['nodeplane-api-server@1.env', 'nodeplane-api-server@2.env'])
    expect(fs.readFileSync(path.join(out, 'nodeplane-api-server@2.env'), 'utf8')).toMatch(/^API_SERVER_PORT=8180$/m)
    const api = fs.readFileSync(path.join(out, 'nodeplane-api-server@.service'), 'utf8')
    expect(api).toContain('\nEnvironmentFile=/etc/np/np.env\nEnvironmentFile=/etc/np/nodeplane-api-server@%i.env\n')
    expect(api).toContain('\nUser=np\nGroup=np\n')
    expect(api).toContain('\nWorkingDirectory=/srv/np\n')
    expect(api).not.toContain('StateDirectory=')
    expect(fs.readFileSync(path.join(out, 'nodeplane.target'), 'utf8')).toContain(
      '\nWants=nodeplane-migrate.service nodeplane-api-server@1.service nodeplane-api-server@2.service nodeplane-orchestrator@1.service nodeplane-orchestrator@2.service\n',
    )

    if (systemdAnalyze) {
      const verified = await verify([
        path.join(out, 'nodeplane-migrate.service'),
        path.join(out, 'nodeplane.target'),
        path.join(out, 'nodeplane-api-server@1.service'),
        path.join(out, 'nodeplane-orchestrator@2.service'),
      ])
      expect(verified.exitCode, verified.output).toBe(0)
      expect(verified.output.split('\n').filter((l) => l.includes('nodeplane'))).toEqual([])
    }
  })

  it.each([
    [['--daemons', 'node-agent'], /node-agent runs on node hosts/],
    [['--daemons', 'web'], /unknown daemon "web"/],
    [['--instances', 'api-server'], /not DAEMON=N/],
    [['--bin', 'bin/run.js'], /--bin must be an absolute path/],
    [['--environment-file', '/etc/node plane.env'], /quoted/],
    [['--user', 'root'], /dedicated user/],
    [['--no-such-flag'], /Nonexistent flag/],
  ])('bad flags %j exit 2 with one line and write nothing', async (flags, message) => {
    const out = path.join(cwd, 'bad')
    const result = await nodeplane(['systemd', 'generate', '--out', out, ...flags], { cwd })
    expect(result.exitCode).toBe(2)
    expect(result.stderr).toMatch(message)
    expect(result.stderr.trim().split('\n')[0]).toMatch(/^Error: /)
    expect(fs.existsSync(out)).toBe(false)
  })

  it('--out is required', async () => {
    const result = await nodeplane(['systemd', 'generate'], { cwd })
    expect(result.exitCode).toBe(2)
    expect(result.stderr).toBe('Error: --out DIR is required: the directory to write the units into (e.g. /etc/systemd/system)')
  })
})
