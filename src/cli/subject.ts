/**
 * The object a command acts on: the first argument (`nodeplane node show ID`), or `--id` for
 * scripts; both given and different is a usage error. One flag name, `--id`, for the subject of
 * every command; the older per-kind names (`--node`, `--subscription`, `--host`, `--user`) stay as
 * aliases of it where a command used them (docs/cli.md, "Ids").
 */
import * as Args from '@oclif/core/args'
import * as Flags from '@oclif/core/flags'
import { ValidationError } from '../errors.js'

/** The first argument: the subject's id (or a unique prefix of it, where the kind is listed). */
export function subjectArg(what: string) {
  // ignoreStdin: oclif otherwise reads a missing first argument from piped stdin, which would take
  // a secret piped to `subscription set-input --secret-stdin` (or a key to login) for the id.
  return Args.string({ name: 'id', description: `${what} (a unique prefix of the id will do)`, ignoreStdin: true })
}

/** `--id`, the same as the first argument; `aliases` are the deprecated names scripts still use. */
export function subjectFlag(what: string, aliases: string[] = []) {
  return Flags.string({ description: `${what}: the same as the first argument, for scripts`, aliases })
}

/** The subject of a command from its first argument and `--id`. */
export function subjectOf(what: string, arg: string | undefined, flag: string | undefined, usage: string): string {
  if (arg !== undefined && flag !== undefined && arg !== flag) {
    throw new ValidationError(`the ${what} is given twice and the two differ: argument "${clip(arg)}" and --id "${clip(flag)}"`, `give it once, e.g. \`${usage}\``)
  }
  const id = arg ?? flag
  if (id === undefined || id.trim() === '') throw new ValidationError(`missing the ${what}: give it as the first argument (or --id)`, `e.g. \`${usage}\``)
  return id.trim()
}

/** Several subjects (`incident ack ID…`): the arguments and every `--id`, each once, in order. */
export function subjectsOf(what: string, args: readonly string[], flags: readonly string[] | undefined, usage: string): string[] {
  const ids = [...new Set([...args, ...(flags ?? [])].map((id) => id.trim()).filter((id) => id.length > 0))]
  if (ids.length === 0) throw new ValidationError(`missing the ${what}: give one or more as arguments (or --id)`, `e.g. \`${usage}\``)
  return ids
}

function clip(value: string): string {
  return value.length > 60 ? `${value.slice(0, 60)}…` : value
}
