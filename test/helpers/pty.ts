/**
 * The binary under a pseudo-terminal (util-linux `script`), for what a command does only on a
 * terminal: colours, tables cut to the width, the ink views, `[y/N]` questions.
 */
import { execa } from 'execa'
import { BIN, cleanEnv, type CliResult } from './cli.js'

export interface TerminalOptions {
  env: Record<string, string>
  cwd: string
  /** What is typed at it (an answer to a question); nothing by default. */
  input?: string
  /** The terminal's width (with 60 rows); the pty's default when absent. */
  columns?: number
  /**
   * An operator's terminal, not a CI job's: without CI (as `.ci/run` sets it), which would make
   * chalk, and so the ink views, leave colour off whatever the terminal.
   */
  withoutCi?: boolean
}

/** Output raw (colours kept), the terminal's \r\n as \n. */
export async function onTerminal(args: string[], options: TerminalOptions): Promise<CliResult> {
  const quoted = ['node', BIN, ...args].map((a) => `'${a.replaceAll("'", "'\\''")}'`).join(' ')
  const command = options.columns === undefined ? quoted : `stty cols ${options.columns} rows 60; ${quoted}`
  const env = cleanEnv(options.env)
  if (options.withoutCi) delete env.CI
  const r = await execa('script', ['-qfec', command, '/dev/null'], { input: options.input ?? '', env, extendEnv: false, cwd: options.cwd, reject: false, timeout: 60_000 })
  return { exitCode: r.exitCode ?? -1, stdout: String(r.stdout).replaceAll('\r\n', '\n'), stderr: String(r.stderr).replaceAll('\r\n', '\n') }
}

/** Without escape sequences (colours, cursor moves) and with \n line ends. */
// eslint-disable-next-line no-control-regex
export const plain = (s: string): string => s.replace(/\u001b\[[0-9;?]*[A-Za-z]/g, '').replaceAll('\r\n', '\n')
