// Subpath imports: the '@oclif/core' index also loads semver, help, ux and more at start-up.
import type { Interfaces } from '@oclif/core'
import { Command } from '@oclif/core/command'
import * as Flags from '@oclif/core/flags'
import { describeFailure } from './errors.js'
import type { Env } from '../config/env.js'

export type CommandFlags<T extends typeof Command> = Interfaces.InferredFlags<(typeof BaseCommand)['baseFlags'] & T['flags']>
export type CommandArgs<T extends typeof Command> = Interfaces.InferredArgs<T['args']>

/**
 * Base of every nodeplane command: `--json` everywhere (the return value is the JSON output),
 * `--data-dir`, and one error path that prints one actionable line (or `{error: …}` with
 * --json) and sets the documented exit code.
 */
export abstract class BaseCommand<T extends typeof Command> extends Command {
  static override enableJsonFlag = true

  static override baseFlags = {
    'data-dir': Flags.string({
      description: 'data directory (default: $NODEPLANE_DATA_DIR or ./.nodeplane)',
      helpGroup: 'GLOBAL',
    }),
  }

  protected flags!: CommandFlags<T>
  protected args!: CommandArgs<T>

  public override async init(): Promise<void> {
    await super.init()
    const { args, flags } = await this.parse({
      flags: this.ctor.flags,
      baseFlags: (this.ctor as typeof BaseCommand).baseFlags,
      enableJsonFlag: this.ctor.enableJsonFlag,
      args: this.ctor.args,
      strict: this.ctor.strict,
    })
    this.flags = flags as CommandFlags<T>
    this.args = args as CommandArgs<T>
  }

  /** The environment the command's config is read from, with `--data-dir` applied. */
  protected env(): Env {
    const dataDir = this.flags?.['data-dir']
    return dataDir ? { ...process.env, NODEPLANE_DATA_DIR: dataDir } : process.env
  }

  protected override async catch(err: Error & { exitCode?: number }): Promise<unknown> {
    const failure = describeFailure(err)
    if (this.jsonEnabled()) {
      this.logJson({ error: { name: failure.name, message: failure.message, details: failure.details, exit_code: failure.exitCode } })
    } else {
      process.stderr.write(`Error: ${failure.message}\n`)
      if (failure.details && failure.details !== failure.message) process.stderr.write(`  ${failure.details}\n`)
    }
    process.exitCode = failure.exitCode
    return undefined
  }
}
