import crypto from 'node:crypto'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import type { StackFile } from '../../src/daemon/stack-file.js'
import { jsonLogLines, nodeplane, spawnNodeplane, tempDir, upPorts, waitForFile } from '../helpers/cli.js'
import { freePort, freePortRange } from '../helpers/ports.js'

describe('nodeplane up', () => {
  const dirs: string[] = []
  const children: Array<ReturnType<typeof spawnNodeplane>> = []
  afterEach(async () => {
    for (const child of children.splice(0)) {
      child.kill('SIGKILL')
      await child
    }
    for (const dir of dirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true })
  })

  it('starts on SQLite, answers /health and /readyz, writes stack.json, and stops cleanly on SIGTERM with 143', async () => {
    const dir = tempDir()
    dirs.push(dir)
    const ports = await upPorts()
    const port = Number(ports.API_SERVER_PORT)
    const child = spawnNodeplane(['up', '--data-dir', path.join(dir, 'data')], { env: ports })
    children.push(child)

    const stackFile = path.join(dir, 'data', 'stack.json')
    const stack = await waitForFile<StackFile>(stackFile, 'stack.json')
    expect(stack).toMatchObject({
      daemons: ['orchestrator', 'health-evaluator', 'agent-gateway', 'payment-service', 'auth-server', 'rpc-gateway', 'api-server'],
      api_url: `http://127.0.0.1:${port}`,
      auth_url: `http://127.0.0.1:${ports.AUTH_SERVER_PORT}`,
      rpc_url: `http://127.0.0.1:${ports.RPC_GATEWAY_PORT}`,
      bus: 'local',
      pid: child.pid,
    })
    expect(stack.database_url).toBe(`sqlite://${path.join(dir, 'data', 'control-plane.db')}`)
    expect(stack.agent_gateway).toBe(`127.0.0.1:${ports.AGENT_GATEWAY_PORT}`)
    expect(fs.readFileSync(stack.agent_ca_file as string, 'utf8')).toContain('BEGIN CERTIFICATE')
    // The payment service runs too, behind mutual TLS with the development set.
    expect(stack.payment_grpc).toBe(`127.0.0.1:${ports.PAYMENT_GRPC_PORT}`)
    expect(stack.payment_ca_file).toBe(path.join(dir, 'data', 'payments-ca', 'ca.pem'))
    expect((await fetch(`${stack.payment_http_url}/health`)).status).toBe(200)
    // The customers' endpoints: up and refusing calls without a key, as JSON-RPC.
    expect((await fetch(`${stack.rpc_url as string}/health`)).status).toBe(200)
    const anonymous = await fetch(`${stack.rpc_url as string}/v1/${crypto.randomUUID()}`, { method: 'POST', body: '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}' })
    expect(anonymous.status).toBe(401)
    expect(await anonymous.json()).toMatchObject({ jsonrpc: '2.0', error: { code: -32001 } })
    expect(await (await fetch(stack.payment_metrics_url as string)).text()).toMatch(/^payments\{status="pending",daemon="payment-service"\} 0$/m)

    const health = await fetch(`${stack.api_url}/health`)
    expect(health.status).toBe(200)
    expect(await health.json()).toEqual({ status: 'healthy' })
    const ready = await fetch(`${stack.api_url}/readyz`)
    expect(ready.status).toBe(200)
    expect(await ready.json()).toMatchObject({ components: { database: { status: 'up' }, bus: { status: 'up' } } })

    // A second `up` on the same data directory is refused while the first runs.
    const second = await nodeplane(['up', '--data-dir', path.join(dir, 'data')], { env: await upPorts() })
    expect(second.exitCode).toBe(4)
    expect(second.stderr).toContain('already running')

    // Another command in another terminal sees the same data.
    const status = await nodeplane(['db', 'status', '--json'], { cwd: dir, env: { NODEPLANE_DATA_DIR: path.join(dir, 'data') } })
    expect(status.exitCode).toBe(0)
    expect(JSON.parse(status.stdout)).toMatchObject({ up_to_date: true })

    child.kill('SIGTERM')
    const result = await child
    expect(result.exitCode).toBe(143)
    expect(fs.existsSync(stackFile)).toBe(false)
    expect(jsonLogLines(result.all).some((l) => l.msg === 'stopped')).toBe(true)
  })

  it('defaults its data directory to ./.nodeplane under the working directory', async () => {
    const dir = tempDir()
    dirs.push(dir)
    const child = spawnNodeplane(['up', '--json'], { cwd: dir, env: await upPorts() })
    children.push(child)
    const stack = await waitForFile<StackFile>(path.join(dir, '.nodeplane', 'stack.json'), 'stack.json')
    expect(stack.data_dir).toBe(path.join(fs.realpathSync(dir), '.nodeplane'))
    child.kill('SIGINT')
    expect((await child).exitCode).toBe(130)
  })

  it('refuses a bad DATABASE_URL or port with one clear message and exit 78', async () => {
    const dir = tempDir()
    dirs.push(dir)
    const result = await nodeplane(['up'], { cwd: dir, env: { DATABASE_URL: 'mysql://root@db/np', API_SERVER_PORT: '99999' } })
    expect(result.exitCode).toBe(78)
    const lines = result.stderr.trim().split('\n')
    expect(lines[0]).toMatch(/^Error: invalid configuration: DATABASE_URL="mysql:\/\/\*\*\*@db\/np": must be sqlite.*; API_SERVER_PORT="99999": must be between 1 and 65535$/)
    expect(fs.existsSync(path.join(dir, '.nodeplane', 'stack.json'))).toBe(false)
  })

  it('says which port is taken when API_SERVER_PORT is in use', async () => {
    const dir = tempDir()
    dirs.push(dir)
    const blocker = net.createServer()
    const port = await freePort()
    await new Promise<void>((resolve) => blocker.listen(port, '127.0.0.1', resolve))
    try {
      const result = await nodeplane(['up'], { cwd: dir, env: { ...(await upPorts()), API_SERVER_PORT: String(port) } })
      expect(result.exitCode).toBe(78)
      expect(result.stderr).toContain(`API_SERVER_PORT: port ${port}`)
      expect(fs.existsSync(path.join(dir, '.nodeplane', 'stack.json'))).toBe(false)
    } finally {
      blocker.close()
    }
  })

  it('keeps gRPC\'s own diagnostics off the terminal: the agent gateway\'s port taken, stderr has only the reason and gRPC\'s line is a log line', async () => {
    const dir = tempDir()
    dirs.push(dir)
    const base = await freePortRange(7)
    const blocker = net.createServer()
    // --port-base puts the agent gateway on base + 2: grpc-js, failing to bind it, prints its own
    // "E <time> | server | No address added …" to stderr unless routed into the logs.
    await new Promise<void>((resolve) => blocker.listen(base + 2, '127.0.0.1', resolve))
    try {
      const result = await nodeplane(['up', '--port-base', String(base)], { cwd: dir })
      expect(result.exitCode).toBe(78)
      expect(result.stderr.trim().split('\n')).toEqual([
        `Error: invalid configuration: AGENT_GATEWAY_PORT: port ${base + 2} on 127.0.0.1 is already in use; stop whatever listens there or choose another port`,
        '  fix the variables named above (docs/configuration.md lists every one)',
      ])
      expect(jsonLogLines(result.stdout).filter((l) => l.daemon === 'grpc')).toEqual([expect.objectContaining({ level: 'warn', msg: 'No address added out of total 1 resolved' })])
    } finally {
      blocker.close()
    }
  })

  it('reports an unreachable Postgres with exit 69 and the reason', async () => {
    const dir = tempDir()
    dirs.push(dir)
    const port = await freePort()
    const result = await nodeplane(['up'], { cwd: dir, env: { DATABASE_URL: `postgres://nodeplane:s3cret@127.0.0.1:${port}/np` } })
    expect(result.exitCode).toBe(69)
    expect(result.stderr).toContain('cannot reach the database at postgres://nodeplane:***@127.0.0.1')
    expect(result.stderr).toContain('ECONNREFUSED')
    expect(result.stderr).not.toContain('s3cret')
  })
})
