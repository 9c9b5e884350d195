/**
 * Starts auth servers on loopback with captured logs and a controllable clock, and signs
 * webhook deliveries the way an identity provider (Standard Webhooks / Svix) does.
 */
import crypto from 'node:crypto'
import os from 'node:os'
import path from 'node:path'
import { Wallet } from 'ethers'
import { startAuthServer, type AuthServerSettings } from '../../../daemons/auth-server.js'
import { signWebhook } from '../../../src/auth/webhooks.js'
import type { Db } from '../../../src/db/knex.js'
import { createLogger } from '../../../src/log.js'
import { tempDir } from '../../helpers/cli.js'
import { LogCapture, type Resources } from '../http/harness.js'

/** A clock tests move by hand; starts 10 s into a minute so rate-limit windows are predictable. */
export class TestClock {
  private at: number
  constructor(start = Date.parse('2030-01-07T10:00:10.000Z')) {
    this.at = start
  }
  readonly now = (): Date => new Date(this.at)
  advance(ms: number): void {
    this.at += ms
  }
  get seconds(): number {
    return Math.floor(this.at / 1000)
  }
}

/** A signing secret as a provider shows it: whsec_ + base64 of random key bytes. */
export function webhookSecret(): string {
  return `whsec_${crypto.randomBytes(24).toString('base64')}`
}

export function keyOf(secret: string): Buffer {
  return Buffer.from(secret.slice('whsec_'.length), 'base64')
}

let sharedKeyDir: string | undefined
/** One RSA key for all servers of a test file (key generation is the slow part of a start). */
export function sharedSigningKeyFile(): string {
  sharedKeyDir ??= tempDir('nodeplane-auth-key-')
  return path.join(sharedKeyDir, 'auth-signing-key.pem')
}

/** What the test auth servers bind wallet sign-in messages to. */
export const SIWE = { domain: 'app.nodeplane.test', uri: 'https://app.nodeplane.test/login', ethereumChainId: 1, solanaChain: 'mainnet' } as const

export interface StartedAuthServer {
  url: string
  logs: LogCapture
}

export async function startTestAuthServer(
  resources: Resources,
  db: Db,
  options: { clock?: TestClock; settings?: Partial<AuthServerSettings>; logs?: LogCapture } = {},
): Promise<StartedAuthServer> {
  const logs = options.logs ?? new LogCapture()
  const settings: AuthServerSettings = {
    NODEPLANE_DATA_DIR: os.tmpdir(),
    HTTP_HOST: '127.0.0.1',
    HTTP_BODY_LIMIT_BYTES: 1024 * 1024,
    HTTP_TRUST_PROXY: false,
    HTTP_MAX_IPS_COUNT: 1,
    AUTH_SERVER_PORT: 0,
    AUTH_PROVIDER: 'both',
    AUTH_IDP_WEBHOOK_SIGNING_SECRET: undefined,
    AUTH_RATE_LIMIT_PER_MINUTE: 1000,
    AUTH_ACCESS_TOKEN_TTL: 15 * 60_000,
    AUTH_REFRESH_TOKEN_TTL: 7 * 24 * 3_600_000,
    AUTH_SIGNING_KEY_FILE: sharedSigningKeyFile(),
    AUTH_SIWE_DOMAIN: SIWE.domain,
    AUTH_SIWE_URI: SIWE.uri,
    AUTH_SIWE_CHAIN_ID: SIWE.ethereumChainId,
    AUTH_SIWE_SOLANA_CHAIN: SIWE.solanaChain,
    ...options.settings,
  }
  const server = await startAuthServer(settings, {
    db,
    logger: createLogger({ destination: logs, level: 'debug', daemon: 'auth-server' }),
    now: options.clock?.now,
  })
  resources.add(() => server.stop())
  return { url: server.url, logs }
}

export interface WebhookDelivery {
  secret: string
  body: unknown
  id?: string
  timestamp: number
  /** Header names: `webhook-*` (default) or `svix-*`. */
  prefix?: 'webhook' | 'svix'
  /** Sent instead of the JSON of `body` (tampering). */
  rawBody?: string
  /** Replaces the computed signature header. */
  signatureHeader?: string
  omit?: Array<'id' | 'timestamp' | 'signature'>
}

export async function deliverWebhook(url: string, delivery: WebhookDelivery): Promise<{ status: number; body: unknown }> {
  const id = delivery.id ?? `msg_${crypto.randomBytes(8).toString('hex')}`
  const signed = JSON.stringify(delivery.body)
  const sent = delivery.rawBody ?? signed
  const prefix = delivery.prefix ?? 'webhook'
  const headers: Record<string, string> = { 'Content-Type': 'application/json' }
  if (!delivery.omit?.includes('id')) headers[`${prefix}-id`] = id
  if (!delivery.omit?.includes('timestamp')) headers[`${prefix}-timestamp`] = String(delivery.timestamp)
  if (!delivery.omit?.includes('signature')) {
    headers[`${prefix}-signature`] = delivery.signatureHeader ?? `v1,${signWebhook(keyOf(delivery.secret), id, delivery.timestamp, signed)}`
  }
  const res = await fetch(`${url}/webhooks/idp`, { method: 'POST', headers, body: sent })
  const text = await res.text()
  let body: unknown = text
  try {
    body = JSON.parse(text)
  } catch {
    // not JSON
  }
  return { status: res.status, body }
}

export function userCreatedEvent(externalId: string, email: string | null): unknown {
  return {
    type: 'user.created',
    object: 'event',
    data: {
      id: externalId,
      object: 'user',
      primary_email_address_id: email ? 'idn_primary' : null,
      email_addresses: email
        ? [
            { id: 'idn_other', email_address: `other-${email}` },
            { id: 'idn_primary', email_address: email },
          ]
        : [],
    },
  }
}

export async function postJson(url: string, body: unknown): Promise<{ status: number; headers: Headers; body: Record<string, unknown> }> {
  const res = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) })
  const text = await res.text()
  return { status: res.status, headers: res.headers, body: text ? (JSON.parse(text) as Record<string, unknown>) : {} }
}

/** A random Ethereum wallet (Wallet.createRandom derives a mnemonic, ~80 ms; this is ~2 ms). */
export function randomWallet(): Wallet {
  return new Wallet(`0x${crypto.randomBytes(32).toString('hex')}`)
}
