/**
 * Questions to a person at a terminal. Prompts go to stderr, so stdout stays the command's
 * output. Commands ask only when `isInteractive()`; in scripts (no TTY) they never wait.
 */
import readline from 'node:readline/promises'
import { Writable } from 'node:stream'
import { DomainError, ValidationError } from '../errors.js'

/** The person said no; nothing was changed (exit 1). */
export class AbortedError extends DomainError {
  readonly status = 400
  readonly code = 'aborted'
}

export function isInteractive(): boolean {
  return Boolean(process.stdin.isTTY && process.stderr.isTTY)
}

export async function confirm(question: string): Promise<boolean> {
  const rl = readline.createInterface({ input: process.stdin, output: process.stderr })
  try {
    const answer = await rl.question(`${question} [y/N] `)
    return /^y(es)?$/i.test(answer.trim())
  } finally {
    rl.close()
  }
}

/** Asks for a secret without echoing it. */
export async function promptSecret(question: string): Promise<string> {
  let muted = false
  const output = new Writable({
    write(chunk: Buffer | string, _encoding, done) {
      if (!muted) process.stderr.write(chunk)
      done()
    },
  })
  const rl = readline.createInterface({ input: process.stdin, output, terminal: true })
  try {
    const answer = rl.question(question)
    muted = true
    return (await answer).trim()
  } finally {
    rl.close()
    process.stderr.write('\n')
  }
}

/** All of stdin (for `--with-key-stdin`), without the trailing newline. */
export async function readStdin(limitBytes = 64 * 1024): Promise<string> {
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of process.stdin) {
    const buffer = Buffer.isBuffer(chunk) ? chunk : Buffer.from(String(chunk))
    size += buffer.length
    if (size > limitBytes) throw new ValidationError('stdin: too large for an API key', 'pipe only the key, e.g. `cat key-file | nodeplane login --with-key-stdin`')
    chunks.push(buffer)
  }
  return Buffer.concat(chunks).toString('utf8').trim()
}

/** What a destructive command is about to do, naming the object: "terminate node 0193… (devnet full, healthy)". */
export interface Confirmation {
  action: string
  /** What follows from it, said after the question. */
  consequence?: string
}

/**
 * Every destructive command confirms through this: with --yes it goes ahead; otherwise `describe`
 * names the object (it may fetch it, so an unknown id or a refused key fails first, and it
 * answers undefined when the action cannot apply and the server will refuse it anyway); on a
 * terminal the person is asked [y/N] (a "no" throws AbortedError), without one the command
 * refuses with a usage error (exit 2) saying to add --yes. A script never changes things for good
 * by accident, and never hangs on a question.
 */
export async function confirmDestructive(yes: boolean, describe: () => Confirmation | undefined | Promise<Confirmation | undefined>): Promise<void> {
  if (yes) return
  const what = await describe()
  if (what === undefined) return
  if (!isInteractive()) throw new ValidationError(`refusing to ${what.action} without --yes: there is no terminal to ask on`, 'add --yes (-y) to confirm')
  const question = `${what.action.charAt(0).toUpperCase()}${what.action.slice(1)}?${what.consequence ? ` ${what.consequence}.` : ''}`
  if (!(await confirm(question))) throw new AbortedError('cancelled; nothing was changed')
}
