/**
 * Exit codes are part of the CLI's contract with scripts (docs/cli.md). Signals follow the
 * shell convention 128 + signal number (SIGINT 130, SIGTERM 143).
 */
export const EXIT = {
  ok: 0,
  failure: 1,
  usage: 2,
  notFound: 3,
  conflict: 4,
  unavailable: 69,
  /** The credentials were refused (401) or lack the scope (403): EX_NOPERM. */
  refused: 77,
  config: 78,
} as const

export type ExitCode = (typeof EXIT)[keyof typeof EXIT]
