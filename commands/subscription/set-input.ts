import fs from 'node:fs/promises'
import * as Flags from '@oclif/core/flags'
import { BaseCommand } from '../../src/cli/base-command.js'
import { subjectArg, subjectFlag } from '../../src/cli/subject.js'
import { resolveApiId } from '../../src/cli/id-prefix.js'
import { apiClientFor, apiUrlFlag } from '../../src/cli/api-flags.js'
import type { ApiClient } from '../../src/cli/api-client.js'
import { isInteractive, promptSecret } from '../../src/cli/prompt.js'
import { NotFoundError, UnavailableError, ValidationError } from '../../src/errors.js'
import { MAX_KEY_MATERIAL_BYTES } from '../../src/secrets/node-key-types.js'
import type { ServerPublicKey } from '../../src/secrets/server-key.js'
import { MAX_TEXT_INPUT_LENGTH } from '../../src/subscriptions/input-limits.js'
import type { InputView } from '../../src/subscriptions/inputs.js'

export interface SetInputResult {
  subscription_id: string
  inputs: InputView[]
}

const SOURCES = ['value', 'value-file', 'secret-file', 'secret-stdin'] as const

export default class SubscriptionSetInput extends BaseCommand<typeof SubscriptionSetInput> {
  static override summary = "Set one provisioning input of your subscription through the API; secrets are sealed locally to the server's key"
  static override description = [
    'Give exactly one of --value, --value-file (text and proof inputs) or --secret-file, --secret-stdin (user-provided secrets).',
    "A secret is sealed here with the server's X25519 public key (GET /api/v1/crypto/public-key; the spec's layout, docs/secrets.md) and only the sealed box is sent; the secret is never printed or logged.",
    '--value-file drops one trailing line break; secrets are sent byte for byte as read (pipe with printf \'%s\', not echo).',
    'Needs the scope subscriptions:write. Exit 2: invalid input; 3: no such subscription of yours; 4: the subscription no longer accepts inputs.',
  ].join('\n')
  static override examples = [
    '<%= config.bin %> subscription set-input 0193a1b2-… --name operator_label --value "rack 7"',
    '<%= config.bin %> subscription set-input "$SUB" --name fee_recipient_key --secret-file ./fee-key.bin',
    "pass show chain/fee-key | <%= config.bin %> subscription set-input \"$SUB\" --name fee_recipient_key --secret-stdin --json",
  ]
  static override args = { id: subjectArg('subscription') }
  static override flags = {
    id: subjectFlag('subscription', ['subscription']),
    name: Flags.string({ description: "the input's name, as the chain profile declares it", required: true }),
    value: Flags.string({ description: 'text or proof input: the value' }),
    'value-file': Flags.string({ description: 'text or proof input: read the value from this file' }),
    'secret-file': Flags.string({ description: 'user-provided secret: read it from this file (sealed locally, never sent in clear)' }),
    'secret-stdin': Flags.boolean({ description: 'user-provided secret: read it from stdin (asked without echo on a terminal)' }),
    'api-url': apiUrlFlag,
  }

  async run(): Promise<SetInputResult> {
    const given = SOURCES.filter((flag) => this.flags[flag] !== undefined && this.flags[flag] !== false)
    if (given.length !== 1) {
      throw new ValidationError(
        given.length === 0
          ? 'give the input with one of --value, --value-file, --secret-file or --secret-stdin'
          : `give only one of --value, --value-file, --secret-file or --secret-stdin (got --${given.join(', --')})`,
      )
    }
    const api = apiClientFor(this.env(), this.flags['api-url'])
    const id = await resolveApiId(api, 'subscription', this.subject('subscription'))
    const source = given[0] as (typeof SOURCES)[number]
    let sent: { name: string; value: string } | { name: string; sealed: string }
    let sealedTo: string | undefined
    if (source === 'value' || source === 'value-file') {
      sent = { name: this.flags.name, value: source === 'value' ? (this.flags.value as string) : await readValueFile(this.flags['value-file'] as string) }
    } else {
      const secret = source === 'secret-file' ? await readSecretFile(this.flags['secret-file'] as string) : await readSecretStdin()
      try {
        // Only secrets are sealed: the sealing code (and tweetnacl) is loaded for them alone.
        const { sealBlob } = await import('../../src/secrets/sealed-blob.js')
        const key = await serverKey(api)
        sent = { name: this.flags.name, sealed: Buffer.from(sealBlob(secret, key.bytes)).toString('base64') }
        sealedTo = key.id
      } finally {
        secret.fill(0)
      }
    }
    const path = `/subscriptions/${encodeURIComponent(id)}/inputs`
    const result = await api.post<SetInputResult>(path, { inputs: [sent] }).catch((err: unknown) => {
      if (err instanceof NotFoundError) throw new NotFoundError(`no subscription ${id} among your subscriptions`, 'check the id (and that the API key is the owner\'s)')
      throw err
    })
    if (!this.jsonEnabled()) {
      const stored = result.inputs.find((i) => i.name === this.flags.name)
      const how = sealedTo ? `sealed to server key ${sealedTo}` : 'stored as given'
      this.log(`Set ${stored?.type ?? 'input'} ${this.flags.name} of subscription ${result.subscription_id} (${how}); status ${stored?.status ?? 'pending'}.`)
    }
    return result
  }
}

async function readValueFile(file: string): Promise<string> {
  const text = await readFileLimited(file, MAX_TEXT_INPUT_LENGTH * 4, '--value-file')
  return text.toString('utf8').replace(/\r?\n$/, '')
}

async function readSecretFile(file: string): Promise<Uint8Array> {
  return new Uint8Array(await readFileLimited(file, MAX_KEY_MATERIAL_BYTES, '--secret-file'))
}

async function readFileLimited(file: string, limitBytes: number, flag: string): Promise<Buffer> {
  let content: Buffer
  try {
    const stat = await fs.stat(file)
    if (!stat.isFile()) throw new ValidationError(`${flag}: ${file} is not a file`)
    if (stat.size > limitBytes) throw new ValidationError(`${flag}: ${file} is larger than ${limitBytes} bytes`)
    content = await fs.readFile(file)
  } catch (err) {
    if (err instanceof ValidationError) throw err
    throw new ValidationError(`${flag}: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`)
  }
  if (content.length === 0) throw new ValidationError(`${flag}: ${file} is empty`)
  return content
}

async function readSecretStdin(): Promise<Uint8Array> {
  if (process.stdin.isTTY) {
    if (!isInteractive()) throw new ValidationError('--secret-stdin: nothing piped in', "pipe the secret in, e.g. `printf '%s' \"$SECRET\" | nodeplane subscription set-input … --secret-stdin`")
    const typed = await promptSecret('Secret (input hidden): ')
    if (typed.length === 0) throw new ValidationError('--secret-stdin: the secret is empty')
    return new Uint8Array(Buffer.from(typed, 'utf8'))
  }
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of process.stdin) {
    const buffer = Buffer.isBuffer(chunk) ? chunk : Buffer.from(String(chunk))
    size += buffer.length
    if (size > MAX_KEY_MATERIAL_BYTES) throw new ValidationError(`--secret-stdin: more than ${MAX_KEY_MATERIAL_BYTES} bytes`)
    chunks.push(buffer)
  }
  const secret = new Uint8Array(Buffer.concat(chunks))
  for (const chunk of chunks) chunk.fill(0)
  if (secret.length === 0) throw new ValidationError('--secret-stdin: nothing was read from stdin')
  return secret
}

/** The server's active public key, checked against its own id before anything is sealed to it. */
async function serverKey(api: ApiClient): Promise<{ id: string; bytes: Uint8Array }> {
  const { SERVER_KEY_ALGORITHM, serverKeyId } = await import('../../src/secrets/server-key.js')
  const { X25519_KEY_BYTES } = await import('../../src/secrets/sealed-blob.js')
  const key = await api.get<ServerPublicKey>('/crypto/public-key')
  const bytes = new Uint8Array(Buffer.from(String(key.public_key), 'base64'))
  if (key.algorithm !== SERVER_KEY_ALGORITHM || bytes.length !== X25519_KEY_BYTES || serverKeyId(bytes) !== key.key_id) {
    throw new UnavailableError(`the API at ${api.url} answered GET /crypto/public-key with an unusable key`, `expected a ${SERVER_KEY_ALGORITHM} key whose key_id is the first 16 hex digits of its SHA-256`)
  }
  return { id: key.key_id, bytes }
}
