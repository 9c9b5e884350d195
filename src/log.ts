import { destination, pino, type DestinationStream, type Logger, type LoggerOptions } from 'pino'

export type { Logger }

/**
 * Keys whose values never reach a log line. Paths cover the usual places a secret travels:
 * headers, request bodies, config objects and our own domain fields.
 */
export const REDACTED_PATHS = [
  'password',
  'token',
  'secret',
  'signature',
  'key',
  'apiKey',
  'api_key',
  'authorization',
  '*.password',
  '*.token',
  '*.secret',
  '*.signature',
  '*.key',
  '*.apiKey',
  '*.api_key',
  '*.authorization',
  '*.access_token',
  '*.refresh_token',
  '*.private_key',
  'req.headers.authorization',
  'req.headers["x-api-key"]',
  'req.headers.cookie',
  'headers.authorization',
  'headers["x-api-key"]',
]

export interface LoggerSettings {
  level?: LoggerOptions['level']
  daemon?: string
  destination?: NodeJS.WritableStream | DestinationStream
}

/** JSON lines on stdout (journald-friendly), with a fixed `daemon` key when given. */
export function createLogger(settings: LoggerSettings = {}): Logger {
  const options: LoggerOptions = {
    level: settings.level ?? 'info',
    base: settings.daemon ? { daemon: settings.daemon } : {},
    redact: { paths: REDACTED_PATHS, censor: '[redacted]' },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
  }
  return pino(options, settings.destination ? (settings.destination as DestinationStream) : stdoutDestination())
}

/**
 * Synchronous writes to fd 1. pino's default asynchronous stream flushes synchronously when the
 * process exits and retries that flush for ever on EPIPE: with stdout's reader gone (journald
 * restarted) a daemon never got past process.exit on SIGTERM. A synchronous stream has no exit
 * flush, and on its first EPIPE pino turns it into a no-op: the logs are dropped, the daemon
 * keeps working and stops when told to.
 */
function stdoutDestination(): DestinationStream {
  return destination({ dest: 1, sync: true })
}
