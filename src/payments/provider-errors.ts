/**
 * A provider's failure as it may be logged, stored (`payment_retries.last_error`) and answered:
 * one line, without the provider's secrets. ethers puts the whole RPC URL (a hosted RPC's API
 * key is in it) and the server's answer in its messages and keeps them on the error (`info`);
 * a card processor's answer (the SDK's `raw`) could quote what we sent. So an error from the
 * outside becomes a new UnavailableError carrying only the redacted line, nothing else of the
 * original; our own typed errors pass as they are (their messages carry no secrets).
 */
import { DomainError, UnavailableError } from '../errors.js'

/** A secret and what stands in its place. */
export type Redaction = readonly [secret: string, placeholder: string]

export function providerFailure(err: unknown, redactions: readonly Redaction[]): string {
  // ethers' shortMessage ("server response 401 Unauthorized") leaves out the request and the answer.
  const short = (err as { shortMessage?: unknown } | undefined)?.shortMessage
  let text = typeof short === 'string' ? short : err instanceof Error ? err.message : String(err)
  for (const [secret, placeholder] of [...redactions].sort((a, b) => b[0].length - a[0].length)) {
    if (secret) text = text.split(secret).join(placeholder)
  }
  return text.split('\n')[0] ?? ''
}

export function redactProviderError(err: unknown, label: string, redactions: readonly Redaction[]): Error {
  if (err instanceof DomainError) return err
  return new UnavailableError(`${label}: ${providerFailure(err, redactions)}`)
}

/**
 * What of an RPC URL is secret: the whole URL as given and as normalised, its credentials, and its
 * path and query (Infura and Alchemy put the key in the path, others in the query).
 */
export function rpcUrlRedactions(rpcUrl: string): Redaction[] {
  const redactions: Redaction[] = [[rpcUrl, '<CRYPTO_RPC_URL>']]
  let url: URL
  try {
    url = new URL(rpcUrl)
  } catch {
    return redactions
  }
  redactions.push([url.href, '<CRYPTO_RPC_URL>'])
  for (const part of [url.username, url.password, url.pathname === '/' ? '' : url.pathname, url.search]) {
    if (part.length >= 4) redactions.push([part, '[redacted]'])
  }
  return redactions
}
