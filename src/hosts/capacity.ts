/**
 * The operator's spelling of a host's capacity and labels (`--capacity cpu=8,memory=32GiB,disk=500GiB`,
 * `--labels k=v,k2=v2`), parsed into what the API takes. Sizes take B, KiB, MiB, GiB, TiB
 * (powers of 1024) and KB, MB, GB, TB (powers of 1000); a bare number is bytes.
 */
import { ValidationError } from '../errors.js'
import type { HostCapacity } from './store.js'

const UNITS: Record<string, number> = { '': 1, b: 1, kib: 2 ** 10, mib: 2 ** 20, gib: 2 ** 30, tib: 2 ** 40, kb: 1e3, mb: 1e6, gb: 1e9, tb: 1e12 }

export function parseSize(text: string, what: string): number {
  const match = /^(\d+(?:\.\d+)?)\s*([a-zA-Z]*)$/.exec(text.trim())
  const unit = UNITS[(match?.[2] ?? '').toLowerCase()]
  if (!match || unit === undefined) throw new ValidationError(`invalid ${what}`, `${what}: "${text}" is not a size (e.g. 32GiB, 500GB, 1TiB)`)
  const bytes = Math.floor(Number(match[1]) * unit)
  if (!Number.isSafeInteger(bytes) || bytes <= 0) throw new ValidationError(`invalid ${what}`, `${what}: "${text}" is out of range`)
  return bytes
}

function pairs(text: string, flag: string): Map<string, string> {
  const out = new Map<string, string>()
  for (const part of text.split(',').map((p) => p.trim()).filter(Boolean)) {
    const eq = part.indexOf('=')
    if (eq <= 0) throw new ValidationError(`invalid ${flag}`, `${flag}: "${part}" is not key=value`)
    const key = part.slice(0, eq).trim()
    if (out.has(key)) throw new ValidationError(`invalid ${flag}`, `${flag}: ${key} is given twice`)
    out.set(key, part.slice(eq + 1).trim())
  }
  return out
}

export function parseCapacity(text: string): HostCapacity {
  const given = pairs(text, '--capacity')
  const unknown = [...given.keys()].filter((k) => !['cpu', 'memory', 'disk'].includes(k))
  if (unknown.length > 0) throw new ValidationError('invalid --capacity', `--capacity: unknown ${unknown.join(', ')}; give cpu=N,memory=SIZE,disk=SIZE`)
  const missing = ['cpu', 'memory', 'disk'].filter((k) => !given.has(k))
  if (missing.length > 0) throw new ValidationError('invalid --capacity', `--capacity: missing ${missing.join(', ')}; give cpu=N,memory=SIZE,disk=SIZE`)
  const cpu = Number(given.get('cpu'))
  if (!Number.isInteger(cpu) || cpu <= 0) throw new ValidationError('invalid --capacity', `--capacity: cpu must be a whole number of cores, not "${given.get('cpu')}"`)
  return { cpu, memory_bytes: parseSize(given.get('memory') as string, '--capacity memory'), disk_bytes: parseSize(given.get('disk') as string, '--capacity disk') }
}

export function parseLabels(text: string): Record<string, string> {
  return Object.fromEntries(pairs(text, '--labels'))
}
