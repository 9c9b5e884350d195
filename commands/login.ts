import * as Flags from '@oclif/core/flags'
import { ApiClient } from '../src/cli/api-client.js'
import { apiUrlFlag } from '../src/cli/api-flags.js'
import { resolveApiTarget, type ApiCredential } from '../src/cli/api-target.js'
import { BaseCommand } from '../src/cli/base-command.js'
import { currentContext, DEFAULT_CONTEXT, requestedContext, writeCredentials } from '../src/cli/credentials.js'
import { isInteractive, promptSecret, readStdin } from '../src/cli/prompt.js'
import type { Me } from '../src/cli/views.js'
import { ValidationError } from '../src/errors.js'

export default class Login extends BaseCommand<typeof Login> {
  static override summary = 'Check an API key (or token) against the API and store it for the other commands'
  static override description = [
    'Stores {api_url, api_key} as a named context (--context, default: the current context, else "default") in $XDG_CONFIG_HOME/nodeplane/credentials.json (default ~/.config/nodeplane; directory 0700, file 0600) after GET /api/v1/me accepted it.',
    'The first context stored becomes the current one; switch with `nodeplane context use NAME`, or pick one per command with --context or $NODEPLANE_CONTEXT.',
    'Give the key on stdin (--with-key-stdin) or at the prompt: a key given with --api-key ends up in your shell history and in the process list.',
    "The URL is --api-url, else $NODEPLANE_API_URL, the context's previous login, or the `nodeplane up` of the data dir.",
  ].join('\n')
  static override examples = [
    '<%= config.bin %> login --api-url https://api.example.com --with-key-stdin < ~/secrets/nodeplane-key',
    'pass show nodeplane/api-key | <%= config.bin %> login --api-url https://api.example.com --with-key-stdin',
    '<%= config.bin %> login --api-url https://api.example.com   # asks for the key without echoing it',
    '<%= config.bin %> login --context staging --api-url https://staging.example.com --with-key-stdin < ~/secrets/staging-key',
  ]
  static override flags = {
    'api-url': apiUrlFlag,
    'api-key': Flags.string({ description: 'the key itself (discouraged: prefer --with-key-stdin)', exclusive: ['with-key-stdin'] }),
    'with-key-stdin': Flags.boolean({ description: 'read the key from stdin (recommended)', exclusive: ['api-key'] }),
  }

  async run(): Promise<Me & { api_url: string; credentials_file: string; context: string; current_context: string }> {
    const credential = await this.credential()
    const given = this.env()
    // The context to store into: --context / NODEPLANE_CONTEXT, else the current one, else "default".
    const context = requestedContext(given) ?? currentContext(given) ?? DEFAULT_CONTEXT
    const env = { ...given, NODEPLANE_CONTEXT: context }
    const target = resolveApiTarget({ env, apiUrl: this.flags['api-url'], apiKey: credential, tolerateBadLogin: true })
    const me = await new ApiClient(target).get<Me>('/me')
    const saved = writeCredentials({ api_url: target.url, api_key: credential.key }, env, context)
    const result = { ...me, api_url: target.url, credentials_file: saved.file, context, current_context: saved.current }
    if (!this.jsonEnabled()) {
      this.log(`Logged in to ${target.url} as ${me.email ?? me.user_id}${me.is_admin ? ' (admin)' : ''}; saved as context ${context} in ${saved.file}`)
      if (saved.current !== context) this.logToStderr(`The current context stays ${saved.current}: use this one with --context ${context}, or \`nodeplane context use ${context}\`.`)
      if (credential.source === 'flag') this.logToStderr('Note: a key given with --api-key stays in your shell history; --with-key-stdin avoids that.')
    }
    return result
  }

  private async credential(): Promise<ApiCredential> {
    let credential: ApiCredential
    if (this.flags['api-key'] !== undefined) credential = { key: this.flags['api-key'].trim(), source: 'flag' }
    else if (this.flags['with-key-stdin'] && !process.stdin.isTTY) credential = { key: await readStdin(), source: 'stdin' }
    else if (isInteractive()) credential = { key: await promptSecret('API key (input hidden): '), source: 'prompt' }
    else throw new ValidationError('no API key given', 'pipe it in: `nodeplane login --with-key-stdin < key-file`')
    if (credential.key.length === 0) throw new ValidationError('the API key is empty')
    if (/\s/.test(credential.key)) throw new ValidationError('the API key must be one word without spaces or line breaks')
    return credential
  }
}
