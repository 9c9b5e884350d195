/** Flags of the commands that talk to the API. */
import * as Flags from '@oclif/core/flags'
import type { Env } from '../config/env.js'
import { ApiClient } from './api-client.js'
import { resolveApiTarget } from './api-target.js'

export const apiUrlFlag = Flags.string({
  description: 'API base URL (default: $NODEPLANE_API_URL, the stored login, or the `nodeplane up` of the data dir)',
  helpGroup: 'API',
})

export const yesFlag = Flags.boolean({ char: 'y', description: 'confirm without being asked (required without a terminal)' })

/**
 * The client for a command: credentials resolved as docs/cli.md describes; there is
 * deliberately no `--api-key` flag here (a key on the command line ends up in shell history).
 */
export function apiClientFor(env: Env, apiUrl: string | undefined): ApiClient {
  return new ApiClient(resolveApiTarget({ env, apiUrl, requireKey: true }))
}
