/**
 * Starts a real PostgreSQL from the installed server binaries in a temp dir on a free port.
 * The server refuses to run as root, so as root it runs as the `postgres` system user.
 * With TEST_DATABASE_URL set, that server is used instead and nothing is started.
 */
import { execFileSync, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import pg from 'pg'
import { freePort, waitFor } from './ports.js'

export interface PostgresServer {
  /** URL of the `postgres` maintenance database on the server. */
  url: string
  /** Stops the server for good and removes its data. */
  stop(): Promise<void>
  /** Takes the server down, keeping its data (an outage); `resume()` brings it back. */
  pause(): Promise<void>
  resume(): Promise<void>
  restart(): Promise<void>
}

export function postgresBinDir(): string {
  if (process.env.PG_BIN_DIR) return process.env.PG_BIN_DIR
  const root = '/usr/lib/postgresql'
  const versions = fs.existsSync(root) ? fs.readdirSync(root).filter((v) => fs.existsSync(path.join(root, v, 'bin', 'postgres'))) : []
  const newest = versions.sort((a, b) => Number(b) - Number(a))[0]
  if (!newest) throw new Error('PostgreSQL server binaries not found under /usr/lib/postgresql (apt-get install postgresql)')
  return path.join(root, newest, 'bin')
}

function asPostgresUser(cmd: string, args: string[]): [string, string[]] {
  return process.getuid?.() === 0 ? ['runuser', ['-u', 'postgres', '--', cmd, ...args]] : [cmd, args]
}

function run(cmd: string, args: string[]): void {
  const [file, argv] = asPostgresUser(cmd, args)
  const result = spawnSync(file, argv, { encoding: 'utf8' })
  if (result.status !== 0) throw new Error(`${cmd} failed (${result.status}): ${result.stderr || result.stdout}`)
}

export async function startPostgres(): Promise<PostgresServer> {
  const external = process.env.TEST_DATABASE_URL
  if (external) return { url: external, stop: async () => {}, pause: async () => {}, resume: async () => {}, restart: async () => {} }

  const bin = postgresBinDir()
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-pg-'))
  if (process.getuid?.() === 0) {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim())
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim())
    fs.chownSync(dir, uid, gid)
  }
  const data = path.join(dir, 'data')
  const port = await freePort()
  run(path.join(bin, 'initdb'), ['-D', data, '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--no-sync', '--locale=C'])
  const options = [
    `-p ${port}`,
    `-k ${dir}`,
    '-c listen_addresses=127.0.0.1',
    '-c fsync=off',
    '-c synchronous_commit=off',
    '-c full_page_writes=off',
    '-c max_connections=300',
    '-c shared_buffers=128MB',
  ].join(' ')
  const start = () => run(path.join(bin, 'pg_ctl'), ['-D', data, '-o', options, '-l', path.join(dir, 'server.log'), '-w', '-t', '60', 'start'])
  const stopServer = () => run(path.join(bin, 'pg_ctl'), ['-D', data, '-m', 'fast', '-w', 'stop'])
  start()
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`
  await waitFor(async () => {
    const client = new pg.Client({ connectionString: url })
    await client.connect()
    await client.end()
    return true
  }, 'postgres to accept connections')

  let stopped = false
  let running = true
  return {
    url,
    async pause() {
      if (running) stopServer()
      running = false
    },
    async resume() {
      if (!running) start()
      running = true
    },
    async restart() {
      if (running) stopServer()
      start()
      running = true
    },
    async stop() {
      if (stopped) return
      stopped = true
      try {
        if (running) stopServer()
      } finally {
        running = false
        fs.rmSync(dir, { recursive: true, force: true })
      }
    },
  }
}

export function databaseUrl(serverUrl: string, database: string): string {
  const u = new URL(serverUrl)
  u.pathname = `/${database}`
  return u.toString()
}

export async function adminQuery(serverUrl: string, sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: serverUrl })
  await client.connect()
  try {
    await client.query(sql)
  } finally {
    await client.end()
  }
}
