/**
 * Where a rollout may take a binary from by URL (docs/artifacts.md, "Allowed sources"). A rollout
 * names the URL its agents fetch; an admin must not be able to point every node of a chain at a
 * file on the hosts (`file:///…/master.key`), at a service only reachable from inside
 * (`http://127.0.0.1:8222/`, `http://169.254.169.254/`), or at any binary of their choosing on the
 * internet. So free URLs are denied by default: a URL is accepted only when it is exactly a
 * release of the chain profile (the operator's own catalogue, checked against its checksum when
 * the catalogue was loaded) or lies under a source the operator allowed (ARTIFACT_ALLOWED_SOURCES).
 * Everything else comes from the artifact store, named by binary, version and digest (resolve.ts).
 *
 * Host names are not resolved, and need not be: a name that resolves to a private address is
 * fetched only if the operator listed it. The agent refuses redirects, so the URL it was given is
 * the only one it fetches.
 */
import net from 'node:net'
import { z } from 'zod'

/**
 * Parses ARTIFACT_ALLOWED_SOURCES: comma-separated URL prefixes, each a `file://` directory or an
 * `http(s)://` origin with an optional path, ending in `/` so a prefix cannot match a sibling
 * (`file:///srv/rel` would otherwise admit `file:///srv/release-evil`).
 */
export const allowedSourcesSetting = z
  .string()
  .optional()
  .transform((text, ctx) => {
    const sources: string[] = []
    for (const raw of (text ?? '').split(',').map((s) => s.trim()).filter((s) => s.length > 0)) {
      let url: URL
      try {
        url = new URL(raw)
      } catch {
        ctx.addIssue({ code: z.ZodIssueCode.custom, message: `"${raw}" is not an absolute URL` })
        continue
      }
      if (!['file:', 'http:', 'https:'].includes(url.protocol)) {
        ctx.addIssue({ code: z.ZodIssueCode.custom, message: `"${raw}" must be a file://, http:// or https:// URL` })
        continue
      }
      if (url.search !== '' || url.hash !== '' || url.username !== '' || url.password !== '') {
        ctx.addIssue({ code: z.ZodIssueCode.custom, message: `"${raw}" must not carry credentials, a query or a fragment` })
        continue
      }
      if (!url.pathname.endsWith('/')) {
        ctx.addIssue({ code: z.ZodIssueCode.custom, message: `"${raw}" must end with "/" (a directory or an origin)` })
        continue
      }
      sources.push(url.href)
    }
    return sources
  })

export type AllowedSources = readonly string[]

/** Why a URL's host is not a public internet address, or undefined when it is one. */
export function internalHostReason(hostname: string): string | undefined {
  const host = hostname.replace(/^\[|\]$/g, '').toLowerCase()
  if (host === '' ) return 'has no host'
  if (host === 'localhost' || host.endsWith('.localhost')) return 'is a loopback name'
  const family = net.isIP(host)
  if (family === 4) return ipv4Reason(host)
  if (family === 6) return ipv6Reason(host)
  return undefined
}

function ipv4Reason(address: string): string | undefined {
  const [a, b] = address.split('.').map(Number) as [number, number, number, number]
  if (a === 127) return 'is a loopback address'
  if (a === 0) return 'is an unspecified address'
  if (a === 169 && b === 254) return 'is a link-local address'
  if (a === 10 || (a === 172 && b >= 16 && b <= 31) || (a === 192 && b === 168)) return 'is a private address'
  if (a === 100 && b >= 64 && b <= 127) return 'is a shared (carrier-grade NAT) address'
  if (a >= 224) return 'is a multicast or reserved address'
  return undefined
}

function ipv6Reason(address: string): string | undefined {
  const words = expandIpv6(address)
  if (!words) return 'is not a valid IPv6 address'
  if (words.every((w) => w === 0)) return 'is an unspecified address'
  if (words.slice(0, 7).every((w) => w === 0) && words[7] === 1) return 'is a loopback address'
  // ::ffff:a.b.c.d and the deprecated ::a.b.c.d carry an IPv4 address.
  if (words.slice(0, 5).every((w) => w === 0) && (words[5] === 0xffff || words[5] === 0)) {
    const v4 = `${words[6]! >> 8}.${words[6]! & 0xff}.${words[7]! >> 8}.${words[7]! & 0xff}`
    return ipv4Reason(v4)
  }
  const first = words[0]!
  if ((first & 0xffc0) === 0xfe80) return 'is a link-local address'
  if ((first & 0xfe00) === 0xfc00) return 'is a private (unique local) address'
  if ((first & 0xffc0) === 0xfec0) return 'is a site-local address'
  if ((first & 0xff00) === 0xff00) return 'is a multicast address'
  return undefined
}

/** The eight 16-bit words of an IPv6 address (a dotted IPv4 tail included). */
function expandIpv6(address: string): number[] | undefined {
  let text = address
  const tail = /(\d+\.\d+\.\d+\.\d+)$/.exec(text)
  if (tail) {
    const parts = tail[1]!.split('.').map(Number)
    text = `${text.slice(0, tail.index)}${((parts[0]! << 8) | parts[1]!).toString(16)}:${((parts[2]! << 8) | parts[3]!).toString(16)}`
  }
  const [head, rest] = text.split('::') as [string, string | undefined]
  const parse = (s: string) => (s === '' ? [] : s.split(':').map((w) => parseInt(w, 16)))
  const left = parse(head)
  const right = rest === undefined ? [] : parse(rest)
  const missing = 8 - left.length - right.length
  if (rest === undefined ? missing !== 0 : missing < 0) return undefined
  const words = [...left, ...new Array<number>(missing).fill(0), ...right]
  return words.some((w) => Number.isNaN(w) || w < 0 || w > 0xffff) ? undefined : words
}

/** Why the URL reaches the hosts themselves or the networks behind them (file://, an internal host); undefined otherwise. */
export function restrictedReason(url: URL): string | undefined {
  if (url.protocol === 'file:') return 'is a file on the node hosts (file://)'
  const reason = internalHostReason(url.hostname)
  return reason === undefined ? undefined : `host ${url.hostname} ${reason}`
}

export interface SourceCheck {
  /** ARTIFACT_ALLOWED_SOURCES, parsed. */
  allowed: AllowedSources
  /**
   * URLs of the chain profile's releases: files the operator's catalogue ships and checked when it
   * was loaded. Trusted by URL alone; a wrong checksum for one only fails the agent's verification.
   */
  trusted?: readonly string[]
}

const REMEDY = 'add it with `nodeplane artifact add` and name it by binary, version and checksum, or allow its source (docs/artifacts.md)'

/**
 * A problem (for a 400's details) unless the rollout's artifact URL is exactly a release of the
 * chain profile or lies under an allowed source; undefined when it is one of those. The problem
 * names the URL as given (without credentials, query or fragment) and the setting, never anything
 * read from the URL: nothing is fetched here.
 */
export function artifactSourceProblem(field: string, urlText: string, check: SourceCheck): string | undefined {
  let url: URL
  try {
    url = new URL(urlText)
  } catch {
    return `${field}: must be an absolute URL`
  }
  if (!['file:', 'http:', 'https:'].includes(url.protocol)) return `${field}: must be an http://, https:// or file:// URL`
  if ((check.trusted ?? []).includes(url.href)) return undefined
  // URL parsing has already resolved "." and ".." segments, so a prefix match cannot be escaped;
  // no allowed source carries credentials, so a URL with some is never under one.
  if (check.allowed.some((source) => url.href.startsWith(source))) return undefined
  const shown = shownUrl(url, urlText)
  const reason = restrictedReason(url)
  if (reason !== undefined) return `${field}: ${shown} ${reason} and is not under an allowed source (ARTIFACT_ALLOWED_SOURCES); ${REMEDY}`
  return `${field}: ${shown} is not under an allowed source (ARTIFACT_ALLOWED_SOURCES) nor a stored artifact; ${REMEDY}`
}

/** The URL as the caller wrote it, unless it carries credentials, a query or a fragment: then without them. */
function shownUrl(url: URL, urlText: string): string {
  if (url.username === '' && url.password === '' && url.search === '' && url.hash === '') return urlText
  const bare = new URL(url.href)
  bare.username = ''
  bare.password = ''
  bare.search = ''
  bare.hash = ''
  return bare.href
}
