import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { execa } from 'execa'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { StackFile } from '../../src/daemon/stack-file.js'
import { createDatabase, type Db } from '../../src/db/knex.js'
import { LocalFileMasterKey } from '../../src/secrets/master-key.js'
import { openWithServerKey } from '../../src/secrets/server-key.js'
import { BIN, cleanEnv, nodeplane, spawnNodeplane, tempDir, upPorts, waitForFile, type CliResult } from '../helpers/cli.js'
import { insertSubscription, insertUser } from '../helpers/fixtures.js'

interface InputsAnswer {
  subscription_id: string
  inputs: Array<{ name: string; type: string; source: string | null; status: string; value: string | null }>
  missing_required?: string[]
}

/**
 * `subscription set-input` and `subscription inputs` over the API of one `nodeplane up` (which
 * creates the master key and the server key pair itself). Subscriptions are written straight
 * into the stack's database: the commands are what is under test.
 */
describe('subscription set-input (against nodeplane up)', () => {
  let dir: string
  let up: ReturnType<typeof spawnNodeplane>
  let db: Db
  let stack: StackFile
  let aliceEnv: Record<string, string>
  let pending: string
  let strangers: string
  let upOutput = ''

  const run = (args: string[], env: Record<string, string> = aliceEnv): Promise<CliResult> => nodeplane(args, { cwd: dir, env })
  const json = <T>(result: CliResult): T => JSON.parse(result.stdout) as T
  const storedRow = (subscriptionId: string, name: string) =>
    db('provisioning_inputs').where({ subscription_id: subscriptionId, name }).first('value', 'sealed_value', 'status', 'type') as Promise<
      { value: string | null; sealed_value: Buffer | null; status: string; type: string } | undefined
    >

  /** Opens a stored box with the stack's own server key: proof the CLI sealed to it in the spec's layout. */
  async function openStored(sealed: Buffer): Promise<Buffer> {
    const masterKey = await LocalFileMasterKey.load(path.join(stack.data_dir, 'master.key'))
    return Buffer.from((await openWithServerKey(db, masterKey, new Uint8Array(sealed))).plaintext)
  }

  beforeAll(async () => {
    dir = fs.realpathSync(tempDir())
    up = spawnNodeplane(['up'], { cwd: dir, env: await upPorts() })
    up.all?.on('data', (chunk: Buffer) => {
      upOutput += chunk.toString('utf8')
    })
    stack = await waitForFile<StackFile>(path.join(dir, '.nodeplane', 'stack.json'), 'stack.json')

    const user = await nodeplane(['user', 'create', '--email', 'alice@example.test', '--json'], { cwd: dir })
    expect(user.exitCode, user.stderr).toBe(0)
    const aliceId = json<{ id: string }>(user).id
    const issued = await nodeplane(['api-key', 'issue', '--user', aliceId, '--name', 'inputs', '--scopes', 'subscriptions:read,subscriptions:write', '--json'], { cwd: dir })
    expect(issued.exitCode, issued.stderr).toBe(0)
    aliceEnv = { NODEPLANE_API_KEY: json<{ key: string }>(issued).key }

    db = createDatabase(stack.database_url)
    pending = await insertSubscription(db, aliceId)
    await db('subscriptions').where({ id: pending }).update({ status: 'pending_payment' })
    strangers = await insertSubscription(db, await insertUser(db))
  })

  afterAll(async () => {
    await db?.destroy()
    up?.kill('SIGTERM')
    if (up) expect((await up).exitCode).toBe(143)
    if (dir) fs.rmSync(dir, { recursive: true, force: true })
  })

  it('sets text inputs from --value and --value-file; --json is the API answer; inputs lists them', { timeout: 90_000 }, async () => {
    const set = await run(['subscription', 'set-input', '--subscription', pending, '--name', 'operator_label', '--value', 'rack 7', '--json'])
    expect(set.exitCode, set.stderr).toBe(0)
    const answer = json<InputsAnswer>(set)
    expect(answer.subscription_id).toBe(pending)
    expect(answer.inputs).toEqual([expect.objectContaining({ name: 'operator_label', type: 'text', status: 'pending', value: 'rack 7' })])
    expect(await storedRow(pending, 'operator_label')).toMatchObject({ value: 'rack 7', sealed_value: null, status: 'pending' })

    const proofFile = path.join(dir, 'proof.txt')
    const proof = `0x${'cd'.repeat(65)}`
    fs.writeFileSync(proofFile, `${proof}\n`)
    const fromFile = await run(['subscription', 'set-input', '--subscription', pending, '--name', 'ownership_proof', '--value-file', proofFile])
    expect(fromFile.exitCode, fromFile.stderr).toBe(0)
    expect(fromFile.stdout.trim()).toBe(`Set proof ownership_proof of subscription ${pending} (stored as given); status pending.`)
    expect((await storedRow(pending, 'ownership_proof'))?.value).toBe(proof)

    const listed = await run(['subscription', 'inputs', '--subscription', pending, '--json'])
    expect(listed.exitCode, listed.stderr).toBe(0)
    expect(json<InputsAnswer>(listed)).toMatchObject({ subscription_id: pending, missing_required: [] })
    expect(json<InputsAnswer>(listed).inputs.map((i) => [i.name, i.value])).toEqual([
      ['operator_label', 'rack 7'],
      ['ownership_proof', proof],
    ])
    const table = await run(['subscription', 'inputs', '--subscription', pending])
    expect(table.exitCode).toBe(0)
    expect(table.stdout).toMatch(/^NAME\s+TYPE\s+STATUS\s+VALUE\s+SET AT$/m)
    expect(table.stdout).toMatch(/^operator_label\s+text\s+pending\s+rack 7\s+(\S+ ago|just now)$/m)
  })

  it('seals secrets from --secret-file and --secret-stdin to the server key; only the sealed box is sent, stored as sent, never printed', { timeout: 90_000 }, async () => {
    const secret = crypto.randomBytes(32)
    const secretFile = path.join(dir, 'fee-key.bin')
    fs.writeFileSync(secretFile, secret, { mode: 0o600 })
    const fromFile = await run(['subscription', 'set-input', '--subscription', pending, '--name', 'fee_recipient_key', '--secret-file', secretFile, '--json'])
    expect(fromFile.exitCode, fromFile.stderr).toBe(0)
    expect(json<InputsAnswer>(fromFile).inputs.find((i) => i.name === 'fee_recipient_key')).toMatchObject({ type: 'secret', source: 'user_provided', status: 'pending', value: null })
    const row = await storedRow(pending, 'fee_recipient_key')
    expect(row?.value).toBeNull()
    const sealed = Buffer.from(row?.sealed_value as Buffer)
    expect(sealed.length).toBe(32 + 24 + secret.length + 16)
    expect((await openStored(sealed)).equals(secret)).toBe(true)

    const typed = `hex-${crypto.randomBytes(16).toString('hex')}`
    const piped = await execa('node', [BIN, 'subscription', 'set-input', '--subscription', pending, '--name', 'fee_recipient_key', '--secret-stdin'], {
      cwd: dir,
      env: cleanEnv(aliceEnv),
      extendEnv: false,
      input: typed,
      reject: false,
      timeout: 60_000,
    })
    expect(piped.exitCode, String(piped.stderr)).toBe(0)
    expect(String(piped.stdout)).toMatch(new RegExp(`^Set secret fee_recipient_key of subscription ${pending} \\(sealed to server key [0-9a-f]{16}\\); status pending\\.$`))
    const replaced = Buffer.from((await storedRow(pending, 'fee_recipient_key'))?.sealed_value as Buffer)
    expect((await openStored(replaced)).toString('utf8')).toBe(typed)

    const output = [fromFile.stdout, fromFile.stderr, String(piped.stdout), String(piped.stderr)].join('\n')
    for (const form of [secret.toString('hex'), secret.toString('base64'), typed, sealed.toString('base64'), replaced.toString('base64')]) expect(output).not.toContain(form)
    expect(upOutput).toContain('provisioning inputs submitted')
    for (const form of [secret.toString('hex'), secret.toString('base64'), typed, sealed.toString('base64')]) expect(upOutput).not.toContain(form)
  })

  it('exits 2 on a bad combination of flags or an input the server refuses, 3 for a subscription that is not yours', { timeout: 90_000 }, async () => {
    const base = ['subscription', 'set-input', '--subscription', pending, '--name', 'operator_label']
    const none = await run(base)
    expect(none.exitCode).toBe(2)
    expect(none.stderr.trim()).toBe('Error: give the input with one of --value, --value-file, --secret-file or --secret-stdin')
    const both = await run([...base, '--value', 'a', '--secret-file', '/dev/null'])
    expect(both.exitCode).toBe(2)
    expect(both.stderr.trim()).toBe('Error: give only one of --value, --value-file, --secret-file or --secret-stdin (got --value, --secret-file)')
    const missingFile = await run([...base, '--value-file', path.join(dir, 'nope.txt')])
    expect(missingFile.exitCode).toBe(2)
    expect(missingFile.stderr).toContain('--value-file: cannot read')

    const badValue = await run([...base, '--value', 'no/slashes'])
    expect(badValue.exitCode).toBe(2)
    expect(badValue.stderr).toContain('operator_label: the value does not match its validation pattern')
    const keyFile = path.join(dir, 'generated.bin')
    fs.writeFileSync(keyFile, crypto.randomBytes(32))
    const generated = await run(['subscription', 'set-input', '--subscription', pending, '--name', 'validator_key', '--secret-file', keyFile, '--json'])
    expect(generated.exitCode).toBe(2)
    expect(json<{ error: { name: string; message: string; exit_code: number } }>(generated).error).toMatchObject({ name: 'ValidationError', exit_code: 2 })
    expect(generated.stdout).toContain('generated by the service')

    for (const id of [strangers, '00000000-0000-4000-8000-000000000000']) {
      const foreign = await run(['subscription', 'set-input', '--subscription', id, '--name', 'operator_label', '--value', 'x'])
      expect(foreign.exitCode, id).toBe(3)
      expect(foreign.stderr.split('\n')[0]).toBe(`Error: no subscription ${id} among your subscriptions`)
      expect((await run(['subscription', 'inputs', '--subscription', id])).exitCode).toBe(3)
    }
    expect(await db('provisioning_inputs').where({ subscription_id: strangers })).toEqual([])

    await db('subscriptions').where({ id: pending }).update({ status: 'terminated' })
    const late = await run([...base, '--value', 'later'])
    expect(late.exitCode).toBe(4)
    expect(late.stderr).toContain('is terminated')
  })
})
