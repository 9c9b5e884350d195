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

/**
 * Destructive commands: ask on a terminal unless `--yes`; in scripts (no TTY) go ahead, as
 * STYLE.md says. A "no" throws AbortedError.
 */
export async function confirmDestructive(question: string, yes: boolean): Promise<void> {
  if (yes || !isInteractive()) return
  if (!(await confirm(question))) throw new AbortedError('cancelled; nothing was changed')
}
