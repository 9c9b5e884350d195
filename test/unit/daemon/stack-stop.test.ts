import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { stopStack } from '../../../src/daemon/stack-stop.js'
import { writeStackFile } from '../../../src/daemon/stack-file.js'
import { ConflictError } from '../../../src/errors.js'

describe('nodeplane down and a reused pid', () => {
  const cleanups: Array<() => void> = []
  afterEach(() => cleanups.splice(0).forEach((c) => c()))

  it('does not signal another program whose command line has an "up" (docker compose up, vagrant up)', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'nodeplane-down-'))
    // Another program holding the pid the crashed stack left in stack.json.
    const other = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)', 'compose', 'up'], { stdio: 'ignore' })
    cleanups.push(() => {
      other.kill('SIGKILL')
      fs.rmSync(dataDir, { recursive: true, force: true })
    })
    await new Promise((resolve) => other.once('spawn', resolve))
    writeStackFile(dataDir, {
      pid: other.pid!,
      started_at: new Date().toISOString(),
      data_dir: dataDir,
      daemons: [],
      api_url: 'http://127.0.0.1:1',
      auth_url: 'http://127.0.0.1:2',
      admin_api_key_file: path.join(dataDir, 'admin-api-key'),
      database_url: 'sqlite://x',
      payments_database_url: 'sqlite://y',
      bus: 'local',
    })

    await expect(stopStack(dataDir, 1_000)).rejects.toThrow(ConflictError)
    await expect(stopStack(dataDir, 1_000)).rejects.toThrow(/is not a nodeplane up/)
    expect(other.exitCode).toBeNull()
    expect(other.signalCode).toBeNull()
  })
})
