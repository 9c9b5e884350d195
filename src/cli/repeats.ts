/**
 * The one rule for repeats (docs/cli.md, "Repeats"): a command whose object is already in the
 * state it moves it to (a second `incident ack`, `api-key revoke`, `host cordon`, `user disable`)
 * succeeds, exit 0, changes nothing, and says so; `--json` answers the object as it is with
 * `changed: false` (`true` when this command moved it). A move the object's state forbids (ack a
 * resolved incident) is still a conflict, exit 4.
 */
import { age } from './human-time.js'

export type Changed<T> = T & { changed: boolean }

/** `Incident 0193… was already acknowledged 5m ago by 0193…; nothing changed.` */
export function alreadyNote(what: string, state: string, since?: string | null, by?: string | null): string {
  return `${what} was already ${state}${since ? ` ${age(since)}` : ''}${by ? ` by ${by}` : ''}; nothing changed.`
}
