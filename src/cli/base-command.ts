// Subpath imports: the '@oclif/core' index also loads semver, help, ux and more at start-up.
import type { Interfaces } from '@oclif/core'
import { Command } from '@oclif/core/command'
import * as Flags from '@oclif/core/flags'
import { selectColumns } from './display.js'
import { describeFailure } from './errors.js'
import { subjectOf } from './subject.js'
import { setWide } from './terminal.js'
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
    wide: Flags.boolean({
      description: 'print tables and views whole: full ids, no cutting at the terminal width',
      helpGroup: 'GLOBAL',
    }),
    context: Flags.string({
      description: 'the stored login to use (default: $NODEPLANE_CONTEXT or the current context; `nodeplane context list`)',
      helpGroup: 'GLOBAL',
    }),
  }

  protected flags!: CommandFlags<T>
  protected args!: CommandArgs<T>
  /** Every positional argument, for commands that take several (`static strict = false`). */
  protected positionals: string[] = []

  public override async init(): Promise<void> {
    await super.init()
    const { args, argv, flags } = await this.parse({
      flags: this.ctor.flags,
      baseFlags: (this.ctor as typeof BaseCommand).baseFlags,
      enableJsonFlag: this.ctor.enableJsonFlag,
      args: this.ctor.args,
      strict: this.ctor.strict,
    })
    this.flags = flags as CommandFlags<T>
    this.args = args as CommandArgs<T>
    this.positionals = argv.map(String)
    const columns = (flags as { columns?: unknown }).columns
    if (typeof columns === 'string') selectColumns(columns)
    setWide((flags as { wide?: boolean }).wide === true)
    // A command with a subject: a missing or doubly given one is a usage error before anything else.
    const subject = this.ctor.args?.id
    if (subject !== undefined && this.ctor.strict !== false) this.subject(subject.description?.replace(/ \(a unique prefix.*$/, '') ?? 'id')
  }

  /** The command's subject: its first argument or `--id`, not both differing (src/cli/subject.ts). */
  protected subject(what: string): string {
    return subjectOf(what, (this.args as { id?: string }).id, (this.flags as { id?: string }).id, `${this.usage()} ID`)
  }

  /** `nodeplane node show`, as a person types it. */
  protected usage(): string {
    return `${this.config.bin} ${(this.id ?? '').replaceAll(':', ' ')}`
  }

  /** The environment the command's config is read from, with `--data-dir` and `--context` applied. */
  protected env(): Env {
    const dataDir = this.flags?.['data-dir']
    const context = this.flags?.context
    if (!dataDir && !context) return process.env
    return { ...process.env, ...(dataDir ? { NODEPLANE_DATA_DIR: dataDir } : {}), ...(context ? { NODEPLANE_CONTEXT: context } : {}) }
  }

  protected override async catch(err: Error & { exitCode?: number }): Promise<unknown> {
    const failure = describeFailure(err)
    // oclif's parse errors: say where the usage is.
    if (failure.name === 'UsageError' && failure.details === undefined) failure.details = `see \`${this.usage()} --help\``
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
