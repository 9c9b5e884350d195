import { pino, type DestinationStream, type Logger, type LoggerOptions } from 'pino'

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
  destination?: NodeJS.WritableStream
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
  return settings.destination ? pino(options, settings.destination as DestinationStream) : pino(options)
}
