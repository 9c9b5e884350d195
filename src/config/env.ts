/**
 * Environment configuration. Each daemon (and each operator command touching the database)
 * has one zod schema composed from the shared parts below; `loadConfig` parses it once at
 * start-up and reports every offending variable in one message.
 */
import path from 'node:path'
import { z } from 'zod'
import { ConfigError } from '../errors.js'
import { parseDatabaseUrl } from '../db/url.js'
import { parseDuration } from './duration.js'
import { parseInstanceTypes } from '../hosts/instance-types.js'
import { applySecretFiles, isSecretSetting } from './secret-settings.js'
import { isPaymentMethod, PAYMENT_METHODS } from '../payments/states.js'
import { allowedSourcesSetting } from '../artifacts/sources.js'
import { releasePublicKeysSetting, requireSignedArtifactsSetting } from '../artifacts/release-keys.js'

export type Env = Record<string, string | undefined>

const port = (fallback: number) =>
  z.coerce
    .number({ invalid_type_error: 'must be a port number' })
    .int('must be a whole number')
    .min(1, 'must be between 1 and 65535')
    .max(65_535, 'must be between 1 and 65535')
    .default(fallback)

const databaseUrl = z
  .string()
  .optional()
  .superRefine((value, ctx) => {
    if (value === undefined) return
    try {
      parseDatabaseUrl(value)
    } catch {
      ctx.addIssue({ code: z.ZodIssueCode.custom, message: 'must be sqlite:///path/file.db or postgres://user@host/db' })
    }
  })

function toMilliseconds(text: string, ctx: z.RefinementCtx): number {
  const ms = parseDuration(text)
  if (ms === null) {
    ctx.addIssue({ code: z.ZodIssueCode.custom, message: `"${text}" is not a duration such as 30s, 5m, 24h` })
    return z.NEVER
  }
  return ms
}

export const duration = (fallback: string) => z.string().default(fallback).transform(toMilliseconds)
const optionalDuration = () => z.string().optional().transform((text, ctx) => (text === undefined ? undefined : toMilliseconds(text, ctx)))

/** Parts every process shares: where data lives, which databases, the bus, logging. */
export const sharedEnv = {
  NODEPLANE_DATA_DIR: z.string().min(1).default('./.nodeplane'),
  DATABASE_URL: databaseUrl,
  PAYMENTS_DATABASE_URL: databaseUrl,
  NATS_URL: z
    .string()
    .optional()
    .refine((v) => v === undefined || /^(nats|tls|wss?):\/\/[^\s]+$/.test(v), 'must look like nats://host:4222'),
  /** Mutual TLS to NATS and this service's nkey (docs/events.md, "Security"); files, read at start. */
  NATS_CA_FILE: z.string().min(1).optional(),
  NATS_CERT_FILE: z.string().min(1).optional(),
  NATS_KEY_FILE: z.string().min(1).optional(),
  NATS_NKEY_SEED_FILE: z.string().min(1).optional(),
  /** The nkey seed itself (from Vault: `vault:<mount>/<path>#<field>`); NATS_NKEY_SEED_FILE is its file form. */
  NATS_NKEY_SEED: z.string().min(1).optional(),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
}

export const portsEnv = {
  API_SERVER_PORT: port(8080),
  AUTH_SERVER_PORT: port(8081),
  AGENT_GATEWAY_PORT: port(9090),
  PAYMENT_GRPC_PORT: port(50051),
  PAYMENT_HTTP_PORT: port(8085),
  PAYMENT_METRICS_PORT: port(9086),
  RPC_GATEWAY_PORT: port(8545),
}

export const eventsEnv = {
  OUTBOX_POLL_INTERVAL: duration('500ms'),
  IDEMPOTENCY_KEY_TTL: duration('7d'),
  OUTBOX_RETENTION: duration('3d'),
}

export const httpEnv = {
  HTTP_HOST: z.string().min(1).default('127.0.0.1'),
  HTTP_BODY_LIMIT_BYTES: z.coerce.number().int().min(1024).max(64 * 1024 * 1024).default(1024 * 1024),
  SHUTDOWN_TIMEOUT: duration('15s'),
  /** Behind a reverse proxy: take the client address from X-Forwarded-For (rate limits, logs). */
  HTTP_TRUST_PROXY: z
    .enum(['true', 'false', '1', '0'], { message: 'must be true or false' })
    .default('false')
    .transform((v) => v === 'true' || v === '1'),
  /**
   * With HTTP_TRUST_PROXY: how many proxies stand in front (Koa's app.maxIpsCount). Only that
   * many rightmost X-Forwarded-For entries are believed; what a client wrote to the left is not.
   */
  HTTP_MAX_IPS_COUNT: z.coerce.number().int('must be a whole number').min(1, 'must be at least 1').max(16).default(1),
}

const urlList = z
  .string()
  .optional()
  .transform((value, ctx) => {
    const items = (value ?? '').split(',').map((v) => v.trim()).filter((v) => v.length > 0)
    for (const item of items) {
      try {
        new URL(item)
      } catch {
        ctx.addIssue({ code: z.ZodIssueCode.custom, message: `"${item.slice(0, 80)}" is not an origin URL` })
      }
    }
    return items
  })

const optionalUrl = z.string().url('must be a URL').optional()

/** Authentication settings both HTTP servers share (spec: Authentication). */
export const authEnv = {
  AUTH_PROVIDER: z.enum(['idp', 'both', 'siwe']).default('idp'),
  /** The identity provider's key set; without it, identity-provider tokens are refused. */
  AUTH_IDP_JWKS_URL: optionalUrl,
  /** Expected `iss` of identity-provider tokens, when set. */
  AUTH_IDP_ISSUER: z.string().min(1).optional(),
  /** Comma-separated origins; the token's `azp` must be one of them. */
  AUTH_IDP_AUTHORIZED_PARTY: urlList,
  /** Credential for the identity provider's backend API (not used by token verification). */
  AUTH_IDP_SECRET_KEY: z.string().min(1).optional(),
  AUTH_CLOCK_SKEW: duration('30s'),
  /** Wallet sign-in messages are bound to this domain (EIP-4361 `domain`: host[:port] of the sign-in page). */
  AUTH_SIWE_DOMAIN: z.string().regex(/^[A-Za-z0-9.-]{1,253}(:\d{1,5})?$/, 'must be a host name, optionally with :port').default('localhost'),
  /** ... and this URI (EIP-4361 `uri`). */
  AUTH_SIWE_URI: z.string().url('must be a URI').default('http://localhost'),
  /** ... and this EIP-155 chain id (Ethereum messages). */
  AUTH_SIWE_CHAIN_ID: z.coerce.number().int().min(1).max(2 ** 53 - 1).default(1),
  /** ... and this chain name (the `Chain ID` line of Solana messages). */
  AUTH_SIWE_SOLANA_CHAIN: z.string().regex(/^[a-z0-9-]{1,64}$/, 'must be a cluster name such as mainnet').default('mainnet'),
}

/** The api-server's own authentication settings. */
export const apiAuthEnv = {
  /** Where the auth-server publishes the legacy wallet path's keys; default: the local auth-server. */
  AUTH_LEGACY_JWKS_URL: optionalUrl,
  API_RATE_LIMIT_PER_MINUTE: z.coerce.number().int().min(1).max(1_000_000).default(600),
  /** Failed authentications per client address and minute before the address gets 429 without a lookup. */
  AUTH_FAILURE_LIMIT_PER_MINUTE: z.coerce.number().int().min(1).max(1_000_000).default(30),
}

/** The auth-server's own settings. */
export const authServerOnlyEnv = {
  AUTH_IDP_WEBHOOK_SIGNING_SECRET: z.string().min(1).optional(),
  AUTH_RATE_LIMIT_PER_MINUTE: z.coerce.number().int().min(1).max(1_000_000).default(20),
  AUTH_ACCESS_TOKEN_TTL: duration('15m'),
  AUTH_REFRESH_TOKEN_TTL: duration('7d'),
  /** PEM file of the RS256 key that signs legacy access tokens; default <data dir>/auth-signing-key.pem. */
  AUTH_SIGNING_KEY_FILE: z.string().min(1).optional(),
}

/** The durable workflow worker (orchestrator). */
export const workflowEnv = {
  /** How long a claimed run stays ours without renewal; a dead orchestrator's runs move after this. */
  WORKFLOW_LEASE: duration('30s'),
  WORKFLOW_POLL_INTERVAL: duration('1s'),
  WORKFLOW_CONCURRENCY: z.coerce.number().int().min(1).max(1_000).default(16),
}

/** The agent-gateway (gRPC for node agents). */
export const agentGatewayOnlyEnv = {
  AGENT_GATEWAY_HOST: z.string().min(1).default('127.0.0.1'),
  /** PEM certificate and key the gateway serves; both unset = the development CA in the data dir. */
  AGENT_GATEWAY_TLS_CERT_FILE: z.string().min(1).optional(),
  AGENT_GATEWAY_TLS_KEY_FILE: z.string().min(1).optional(),
  /** Told to agents at registration (spec: 15 s). */
  AGENT_HEARTBEAT_INTERVAL: duration('15s'),
  /** Told to agents: how often they check a running command for progress (spec: 30 s). */
  AGENT_PROGRESS_CHECK_INTERVAL: duration('30s'),
  /** How long heartbeats wait in memory before one batched write. */
  HEARTBEAT_FLUSH_INTERVAL: duration('25ms'),
  AGENT_COMMAND_POLL_INTERVAL: duration('250ms'),
  /** Sync-status changes admitted per node per AGENT_SYNC_CHANGE_WINDOW before it counts as flapping (docs/health.md). */
  AGENT_SYNC_CHANGE_LIMIT: z.coerce.number().int().min(2).max(10_000).default(20),
  AGENT_SYNC_CHANGE_WINDOW: duration('10m'),
}

const HOST_PORT = /^[A-Za-z0-9.\-]+:\d{1,5}$|^\[[0-9A-Fa-f:]+\]:\d{1,5}$/
const gatewayTarget = z.string().regex(HOST_PORT, 'must be host:port, e.g. 127.0.0.1:9090')
/** One or more host:port, comma-separated: an agent that loses one gateway dials the next. */
const gatewayTargets = z
  .string()
  .refine((v) => v.split(',').every((t) => HOST_PORT.test(t.trim())), 'must be host:port, or several separated by commas, e.g. 10.0.0.1:9090,10.0.0.2:9090')
  .transform((v) => v.split(',').map((t) => t.trim()).join(','))

/** Fencing (docs/node-agent.md, "Fencing"): the agents' and the control plane's must be the same value. */
const fenceTimeout = duration('60s').refine((ms) => ms >= 100, 'must be at least 100ms')

/** The node lifecycle workflows (orchestrator): chains, infrastructure, how agents reach the gateway. */
export const lifecycleEnv = {
  /**
   * Fencing: a migration starts the new host's chain no earlier than this after the old agent's
   * last heartbeat; handed to the agents the local provider starts as NODE_AGENT_FENCE_TIMEOUT.
   * Must stay below HEARTBEAT_TIMEOUT + MIGRATION_GRACE (checked at start-up).
   */
  AGENT_FENCE_TIMEOUT: fenceTimeout,
  /** Holds `chains/` (and later `upgrades/`); default: the installed package's own. */
  NODEPLANE_CONFIG_DIR: z.string().min(1).optional(),
  /** Spec: `latest` (the config dir's chains/, re-read while running) or a pinned tag (chain-catalogue/<tag>/). */
  CHAIN_PROFILE_VERSION: z
    .string()
    .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, 'must be latest or a catalogue tag (letters, digits, ".", "_" or "-")')
    .default('latest'),
  /** Spec: how often `latest` is checked for a new version, default 1 minute. */
  CHAINS_CHECK_INTERVAL: duration('1m'),
  /** host:port new agents dial (several, comma-separated, for several gateways); default 127.0.0.1:$AGENT_GATEWAY_PORT. */
  AGENT_GATEWAY_URL: gatewayTargets.optional(),
  /** The CA new agents trust; default the development CA, <data dir>/agent-ca/ca.pem. */
  AGENT_GATEWAY_CA_FILE: z.string().min(1).optional(),
  AGENT_GATEWAY_SERVER_NAME: z.string().min(1).optional(),
  /** Spec: agent ready wait, 5 minutes. */
  AGENT_READY_WAIT: duration('5m'),
  /** How long one agent command may run before its step gives up. */
  AGENT_COMMAND_TIMEOUT: duration('10m'),
  /** Where node snapshots are kept for migrations (a directory, file:// store); default <data dir>/backups. */
  BACKUP_STORE_DIR: z.string().min(1).optional(),
  /** Spec: migration cooldown between attempts, 1 hour. */
  MIGRATION_COOLDOWN: duration('1h'),
  /** Where the local infrastructure provider keeps hosts; default <data dir>/hosts. */
  LOCAL_HOSTS_DIR: z.string().min(1).optional(),
}

/** The node agent: no database; it talks only to the gateway. */
export const nodeAgentEnv = z.object({
  LOG_LEVEL: sharedEnv.LOG_LEVEL,
  SHUTDOWN_TIMEOUT: httpEnv.SHUTDOWN_TIMEOUT,
  /** host:port of the agent-gateway; several, comma-separated, are dialled in turn when one is lost. */
  AGENT_GATEWAY_URL: gatewayTargets,
  AGENT_GATEWAY_CA_FILE: z.string().min(1, 'must name the PEM file of the CA that signed the gateway certificate'),
  /** The name to check the gateway certificate against, when it differs from the dialled host. */
  AGENT_GATEWAY_SERVER_NAME: z.string().min(1).optional(),
  NODE_AGENT_NODE_ID: z.string().uuid('must be the node UUID'),
  /** File holding the node token (mode 0600); the token never goes in the environment. */
  NODE_AGENT_TOKEN_FILE: z.string().min(1),
  NODE_AGENT_STATE_DIR: z.string().min(1),
  /** Overrides the gateway's intervals (tests, debugging). */
  NODE_AGENT_HEARTBEAT_INTERVAL: optionalDuration(),
  NODE_AGENT_PROGRESS_CHECK_INTERVAL: optionalDuration(),
  /** Release public keys a signed artifact must verify against (docs/artifacts.md). */
  ARTIFACT_RELEASE_PUBLIC_KEYS: releasePublicKeysSetting,
  /** Refuse artifacts without a release signature; unset: true when ARTIFACT_RELEASE_PUBLIC_KEYS is set (docs/artifacts.md). */
  AGENT_REQUIRE_SIGNED_ARTIFACTS: requireSignedArtifactsSetting,
  /** Fencing: with no heartbeat acknowledged by any gateway for this long, the chain is stopped (docs/node-agent.md). */
  NODE_AGENT_FENCE_TIMEOUT: fenceTimeout,
})


/** The key hierarchy's master key (docs/secrets.md). */
export const secretsEnv = {
  /** `local` keeps the master key in a file (`nodeplane secrets init`); `vault`: Vault's transit engine (docs/secrets.md). */
  SECRETS_PROVIDER: z.enum(['local', 'vault'], { message: 'must be local or vault' }).default('local'),
  /** Default: <data dir>/master.key */
  SECRETS_MASTER_KEY_FILE: z.string().min(1).optional(),
}

const vaultPathSegments = z.string().regex(/^[A-Za-z0-9_.-]+(\/[A-Za-z0-9_.-]+)*$/, 'must be a Vault mount path such as transit')

/**
 * HashiCorp Vault (docs/secrets.md): read before the daemon's own schema, since `vault:`
 * references in other settings are resolved from it. Needed with SECRETS_PROVIDER=vault or any
 * `vault:` reference; the role and secret ids are secrets (VAULT_ROLE_ID_FILE, VAULT_SECRET_ID_FILE).
 */
export const vaultEnv = {
  VAULT_ADDR: z
    .string()
    .url('must be a URL such as https://vault.internal:8200')
    .regex(/^https?:\/\//, 'must be an http:// or https:// URL')
    // Tokens, AppRole ids and secrets cross this connection: plain HTTP only to this host (a dev server).
    .refine((url) => url.startsWith('https://') || isLoopbackUrl(url), 'must be https:// (plain http:// only to 127.0.0.1, ::1 or localhost)')
    .optional(),
  /** PEM of the CA that signed Vault's certificate, trusted alone; default: the system's CAs. */
  VAULT_CACERT: z.string().min(1).optional(),
  /** Vault's CLI honours it; nodeplane never skips verification, so a set value is refused rather than ignored. */
  VAULT_SKIP_VERIFY: z
    .string()
    .optional()
    .refine((v) => v === undefined || v === '' || v === 'false' || v === '0', "not supported: nodeplane always verifies Vault's certificate; put the CA that signed it in VAULT_CACERT"),
  /** Vault Enterprise namespace, sent as X-Vault-Namespace. */
  VAULT_NAMESPACE: z.string().min(1).optional(),
  VAULT_ROLE_ID: z.string().min(1).optional(),
  VAULT_SECRET_ID: z.string().min(1).optional(),
  VAULT_APPROLE_MOUNT: vaultPathSegments.default('approle'),
  VAULT_TRANSIT_MOUNT: vaultPathSegments.default('transit'),
  /** The transit key that wraps data keys and server secret keys. */
  VAULT_TRANSIT_KEY: z.string().regex(/^[A-Za-z0-9_.-]{1,128}$/, 'must be a transit key name (letters, digits, ".", "_" or "-")').default('nodeplane-master'),
  VAULT_REQUEST_TIMEOUT: duration('5s'),
  /** After a failure, Vault is tried again after VAULT_RETRY_MIN, doubling up to VAULT_RETRY_MAX. */
  VAULT_RETRY_MIN: duration('1s'),
  VAULT_RETRY_MAX: duration('30s'),
}
function isLoopbackUrl(url: string): boolean {
  const host = new URL(url).hostname
  return host === 'localhost' || host === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(host)
}
export const vaultSettingsSchema = z.object({ SECRETS_PROVIDER: z.enum(['local', 'vault'], { message: 'must be local or vault' }).default('local'), ...vaultEnv })
export type VaultSettings = z.infer<typeof vaultSettingsSchema>

const bool = (fallback: 'true' | 'false') =>
  z
    .enum(['true', 'false', '1', '0'], { message: 'must be true or false' })
    .default(fallback)
    .transform((v) => v === 'true' || v === '1')

const evmAddress = z.string().regex(/^0x[0-9a-fA-F]{40}$/, 'must be a 0x-prefixed 20-byte address')

/** Mutual TLS between the control plane and the payment service (docs/payments.md, "mTLS"). */
export const paymentTlsEnv = {
  /** The CA both sides trust; default: the development CA of `nodeplane certs dev`, <data dir>/payments-ca/. */
  PAYMENT_TLS_CA_FILE: z.string().min(1).optional(),
}

/** The payment service daemon. */
export const paymentServiceOnlyEnv = {
  PAYMENT_GRPC_HOST: z.string().min(1).default('127.0.0.1'),
  PAYMENT_TLS_CERT_FILE: z.string().min(1).optional(),
  PAYMENT_TLS_KEY_FILE: z.string().min(1).optional(),
  /** Comma-separated common names of client certificates allowed to call PaymentService. */
  PAYMENT_ALLOWED_CLIENTS: z
    .string()
    .default('nodeplane-control-plane')
    .transform((v) => v.split(',').map((s) => s.trim()).filter((s) => s.length > 0))
    .refine((list) => list.length > 0, 'must name at least one client certificate common name'),
  /** The pricing file; default <config dir>/pricing.yaml. */
  PAYMENT_PRICING_FILE: z.string().min(1).optional(),
  /** How often expired payment sessions are looked for. */
  PAYMENT_EXPIRY_CHECK_INTERVAL: duration('30s'),
  /** How often pending payments past expiry are checked with their provider (a lost webhook). */
  PAYMENT_RECONCILE_INTERVAL: duration('1m'),
  /** How long processed webhook event ids are kept to recognise a redelivery; at least the 5 minute signature window. */
  PAYMENT_PROVIDER_EVENT_RETENTION: duration('3d').refine((ms) => ms >= 5 * 60_000, 'must be at least 5m (the webhook signature window)'),
  PAYMENT_TEST_PROVIDER_ENABLED: bool('false'),
  /** The methods the test provider takes (comma-separated card, crypto); default both. */
  PAYMENT_TEST_PROVIDER_METHODS: z
    .string()
    .optional()
    .transform((v) => (v === undefined ? undefined : v.split(',').map((s) => s.trim()).filter((s) => s.length > 0)))
    .refine((list) => list === undefined || (list.length > 0 && list.every(isPaymentMethod)), `must name one or more of ${PAYMENT_METHODS.join(', ')}, comma-separated`)
    .transform((list) => (list === undefined ? undefined : [...new Set(list.filter(isPaymentMethod))])),
  PAYMENT_TEST_PROVIDER_DELAY: duration('2s'),
  PAYMENT_TEST_PROVIDER_FAILURE_RATE: z.coerce.number().min(0, 'must be between 0 and 1').max(1, 'must be between 0 and 1').default(0),
  CARD_PROVIDER_ENABLED: bool('false'),
  /** The card processor's secret API key (from the secrets manager; never logged). */
  CARD_PROVIDER_SECRET_KEY: z.string().min(1).optional(),
  /** The card processor's webhook signing secret (from the secrets manager; never logged). */
  CARD_PROVIDER_WEBHOOK_SECRET: z.string().min(1).optional(),
  /** Override of the card processor's API base URL (a local fake in tests). */
  CARD_PROVIDER_API_URL: z.string().url('must be a URL').optional(),
  CRYPTO_PROVIDER_ENABLED: bool('false'),
  CRYPTO_RECEIVER_ADDRESS: evmAddress.optional(),
  /** JSON-RPC endpoint of the chain the token contracts live on. */
  CRYPTO_RPC_URL: z.string().url('must be a URL').optional(),
  /** Comma-separated CURRENCY=0xcontract pairs, e.g. USDC=0x…,USDT=0x…,ETH=0x… (the ETH memo router). */
  CRYPTO_TOKEN_CONTRACTS: z.string().optional(),
  /** Blocks a transfer must be buried under before it completes a payment. */
  CRYPTO_CONFIRMATIONS: z.coerce.number().int().min(0).max(1_000).default(12),
  CRYPTO_POLL_INTERVAL: duration('5s'),
  /** First block the watcher reads when it has no cursor yet; default: the current head. */
  CRYPTO_START_BLOCK: z.coerce.number().int().min(0).optional(),
}

/** The control plane's client of the payment service. */
export const paymentClientEnv = {
  /** host:port of the payment service's gRPC; default 127.0.0.1:$PAYMENT_GRPC_PORT. */
  PAYMENT_SERVICE_URL: gatewayTarget.optional(),
  /** Name to check the payment service's certificate against, when it differs from the dialled host. */
  PAYMENT_SERVICE_SERVER_NAME: z.string().min(1).optional(),
  PAYMENT_CLIENT_CERT_FILE: z.string().min(1).optional(),
  PAYMENT_CLIENT_KEY_FILE: z.string().min(1).optional(),
  PAYMENT_CALL_TIMEOUT: duration('30s'),
}

/** The control plane's consumer of payment events (orchestrator, `up`). */
export const paymentConsumerEnv = {
  /**
   * payment events handled at once by one orchestrator (each waits on the payment service's
   * confirmation, then on its own transaction); two deliveries of one payment still wait for each other.
   */
  PAYMENT_CONSUMER_CONCURRENCY: z.coerce.number().int().min(1).max(256).default(8),
}

/** Uptime (docs/uptime.md): the hourly rollup worker, run by the health-evaluator. */
export const uptimeEnv = {
  /** How often the worker turns the state log into hourly buckets (spec: every 5 minutes). */
  UPTIME_ROLLUP_INTERVAL: duration('5m'),
  /** Nodes per batch (spec: 500). */
  UPTIME_ROLLUP_BATCH_SIZE: z.coerce.number().int().min(1).max(10_000).default(500),
  /** Buckets and state-log rows older than this are purged (spec: 90 days). */
  UPTIME_RETENTION: duration('90d').refine((ms) => ms >= 31 * 86_400_000, 'must be at least 31d: the 30d window reads that far back'),
}

/** Subscription lifecycle (spec: "Subscription status"), run by the health-evaluator's cleanup scheduler. */
export const subscriptionLifecycleEnv = {
  /** Spec: a pending_payment subscription older than this is deleted (default 30 minutes). */
  PENDING_SUBSCRIPTION_TTL: duration('30m'),
  /** Spec: 24 hours between expiry (expiring) and termination. */
  SUBSCRIPTION_GRACE_PERIOD: duration('24h'),
  /** How often the cleanup scheduler runs. */
  SUBSCRIPTION_CLEANUP_INTERVAL: duration('1m'),
  /** How often the provision-retry job looks for paid subscriptions whose node failed to provision (docs/node-lifecycle.md). */
  PROVISION_RETRY_INTERVAL: duration('1m'),
  /** Automatic provisioning retries after the payment's own attempt failed; then an incident and a notification. */
  PROVISION_RETRY_ATTEMPTS: z.coerce.number().int().min(1).max(20).default(3),
  /** Wait before the first retry; it doubles for each one after, up to PROVISION_RETRY_BACKOFF_MAX. */
  PROVISION_RETRY_BACKOFF: duration('2m'),
  PROVISION_RETRY_BACKOFF_MAX: duration('1h'),
}

/** Health evaluation (docs/health.md), run by the health-evaluator. */
export const healthEvaluationEnv = {
  /** One heartbeat and policy evaluation cycle over the fleet (the agents heartbeat every 15 s). */
  HEALTH_EVALUATION_INTERVAL: duration('15s'),
  /** Spec: heartbeat timeout 60 s; also how old an agent's report may be for the policy evaluation. */
  HEARTBEAT_TIMEOUT: duration('60s'),
  /** Spec: wait after DOWN before migrating, 60 s. */
  MIGRATION_GRACE: duration('60s'),
  /** At most this many migrations start per cycle, oldest outage first. */
  MIGRATIONS_PER_CYCLE: z.coerce.number().int().min(1).max(10_000).default(10),
  /** Spec: the periodic check for nodes left in maintenance, every 30 minutes. */
  MAINTENANCE_RECOVERY_INTERVAL: duration('30m'),
  /** A node in maintenance this long, held by no workflow or running rollout, is recovered. */
  MAINTENANCE_RECOVERY_AFTER: duration('1h'),
}

/** Incidents (docs/incidents.md), raised by the health-incidents consumer and advanced by the evaluation cycle. */
export const incidentEnv = {
  /** K: consecutive evaluation cycles with the node recovered before an incident auto-resolves. */
  INCIDENT_RESOLUTION_DEBOUNCE: z.coerce.number().int().min(1).max(1_000).default(3),
  /** Transitions of one node into one category within INCIDENT_FLAP_WINDOW that make it flapping. */
  INCIDENT_FLAP_THRESHOLD: z.coerce.number().int().min(2).max(1_000).default(3),
  INCIDENT_FLAP_WINDOW: duration('15m'),
  /** No new transition for this long ends flapping. */
  INCIDENT_FLAP_QUIET: duration('15m'),
  /** An open, unacknowledged warning incident still unrecovered after this long escalates to critical. */
  INCIDENT_ESCALATE_AFTER: duration('1h'),
}

/** The host fleet (docs/infrastructure.md): SSH to hosts, their keys, the health probe. */
export const hostsEnv = {
  /** Hosts' SSH private keys, one file per host (0600); default <data dir>/secrets/ssh. Every server reaching hosts needs the same. */
  HOSTS_SSH_KEY_DIR: z.string().min(1).optional(),
  HOSTS_SSH_CONNECT_TIMEOUT: duration('10s'),
  /** Commands run at once on one host over its one connection (OpenSSH allows 10 by default). */
  HOSTS_SSH_MAX_SESSIONS: z.coerce.number().int().min(1).max(10).default(4),
  /** Free space a host's root directory needs for `host add` (B, KiB, MiB, GiB, TiB; KB, MB, GB, TB). */
  HOSTS_MIN_FREE_DISK: z
    .string()
    .default('10GiB')
    .transform((text, ctx) => {
      const match = /^(\d+)\s*(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)?$/.exec(text.trim())
      const unit = { B: 1, KiB: 2 ** 10, MiB: 2 ** 20, GiB: 2 ** 30, TiB: 2 ** 40, KB: 1e3, MB: 1e6, GB: 1e9, TB: 1e12 }[match?.[2] ?? 'B']
      if (!match || unit === undefined) {
        ctx.addIssue({ code: z.ZodIssueCode.custom, message: `"${text}" is not a size such as 10GiB` })
        return z.NEVER
      }
      return Number(match[1]) * unit
    }),
  /** How often the health probe asks every host over SSH (ready <-> unreachable). */
  HOSTS_PROBE_INTERVAL: duration('30s'),
  /** A host that does not answer the probe within this is unreachable. */
  HOSTS_PROBE_TIMEOUT: duration('10s'),
  /** Failed probes in a row before a ready host is unreachable (one success resets the count). */
  HOSTS_PROBE_FAILURES: z.coerce.number().int().min(1).max(100).default(3),
  /** What instance types need on a fleet host: `name:cpu=N,memory=SIZE,disk=SIZE;…`, on top of ssh.small/medium/large. */
  HOSTS_INSTANCE_TYPES: z
    .string()
    .optional()
    .transform((text, ctx) => {
      try {
        return parseInstanceTypes(text)
      } catch (err) {
        ctx.addIssue({ code: z.ZodIssueCode.custom, message: (err as Error).message })
        return z.NEVER
      }
    }),
  /** How long a placement waits for a host with room before the provisioning fails (under the 15-minute infrastructure step). */
  HOSTS_PLACEMENT_WAIT: duration('5m').refine((ms) => ms <= 14 * 60_000, 'must be at most 14m (the infrastructure step times out at 15m)'),
  /** How often a waiting placement looks for room again. */
  HOSTS_PLACEMENT_RETRY_INTERVAL: duration('15s'),
  /** How often the orchestrator releases host reservations that outlived their node (docs/infrastructure.md, "Reservations that outlive their node"). */
  HOSTS_RECONCILE_INTERVAL: duration('1m'),
  /** How the `ssh` provider runs agents: systemd when the host has it and the login is root (auto), or always one way. */
  HOSTS_AGENT_SUPERVISOR: z.enum(['auto', 'systemd', 'detached']).default('auto'),
  /** The node-agent bundle uploaded to hosts; default the package's dist/agent/node-agent.mjs (npm run build). */
  HOSTS_AGENT_BUNDLE: z.string().min(1).optional(),
  /** The ports nodes' chains take on a fleet host, `first-last`; each node on a host gets its own. */
  HOSTS_RPC_PORTS: z
    .string()
    .default('10000-19999')
    .transform((text, ctx) => {
      const match = /^(\d{1,5})-(\d{1,5})$/.exec(text.trim())
      const first = Number(match?.[1])
      const last = Number(match?.[2])
      if (!match || first < 1024 || last > 65_535 || first > last) {
        ctx.addIssue({ code: z.ZodIssueCode.custom, message: `"${text}" is not a port range such as 10000-19999 (from 1024 up)` })
        return z.NEVER
      }
      return { first, last }
    }),
}

export const healthEvaluatorEnv = z.object({
  ...sharedEnv,
  ...eventsEnv,
  SHUTDOWN_TIMEOUT: httpEnv.SHUTDOWN_TIMEOUT,
  ...subscriptionLifecycleEnv,
  ...healthEvaluationEnv,
  ...incidentEnv,
  ...uptimeEnv,
  NODEPLANE_CONFIG_DIR: lifecycleEnv.NODEPLANE_CONFIG_DIR,
  CHAIN_PROFILE_VERSION: lifecycleEnv.CHAIN_PROFILE_VERSION,
  CHAINS_CHECK_INTERVAL: lifecycleEnv.CHAINS_CHECK_INTERVAL,
  MIGRATION_COOLDOWN: lifecycleEnv.MIGRATION_COOLDOWN,
  AGENT_FENCE_TIMEOUT: lifecycleEnv.AGENT_FENCE_TIMEOUT,
  ...hostsEnv,
})

/** The rpc-gateway's own settings (docs/rpc-gateway.md). */
export const rpcGatewayOnlyEnv = {
  /** Sustained JSON-RPC calls per second per API key (token bucket refill); a batch counts each call. */
  RPC_GATEWAY_RATE_LIMIT_PER_SECOND: z.coerce.number().int().min(1).max(1_000_000).default(50),
  /** The bucket's size: calls a key that was idle may make at once. */
  RPC_GATEWAY_RATE_LIMIT_BURST: z.coerce.number().int().min(1).max(1_000_000).default(100),
  RPC_GATEWAY_BODY_LIMIT_BYTES: z.coerce.number().int().min(1024).max(64 * 1024 * 1024).default(1024 * 1024),
  RPC_GATEWAY_MAX_BATCH: z.coerce.number().int().min(1).max(10_000).default(100),
  /** How long a node's route is used without re-reading it, when no event says it changed. */
  RPC_GATEWAY_ROUTE_TTL: duration('5s'),
  RPC_GATEWAY_UPSTREAM_TIMEOUT: duration('30s'),
  /** `eth_subscribe` calls one WebSocket connection may hold. */
  RPC_GATEWAY_MAX_SUBSCRIPTIONS: z.coerce.number().int().min(1).max(10_000).default(100),
  /** How often an open WebSocket's API key is checked again (a revoked key's connections close within it). */
  RPC_GATEWAY_KEY_RECHECK: duration('10s'),
}

/** Where customers reach the rpc-gateway, for the endpoints the api-server shows; default http://127.0.0.1:$RPC_GATEWAY_PORT. */
export const rpcPublicUrlEnv = {
  RPC_PUBLIC_URL: z.string().url('must be a URL').regex(/^https?:\/\//, 'must be an http:// or https:// URL').optional(),
  RPC_GATEWAY_PORT: portsEnv.RPC_GATEWAY_PORT,
}

export const databaseCommandEnv = z.object(sharedEnv)
/** Rollout artifacts (docs/artifacts.md): the file:// and internal-host prefixes the operator allows. */
export const artifactEnv = {
  ARTIFACT_ALLOWED_SOURCES: allowedSourcesSetting,
  ARTIFACT_RELEASE_PUBLIC_KEYS: releasePublicKeysSetting,
}

export const apiServerEnv = z.object({
  ...sharedEnv,
  ...artifactEnv,
  ...secretsEnv,
  NODEPLANE_CONFIG_DIR: lifecycleEnv.NODEPLANE_CONFIG_DIR,
  CHAIN_PROFILE_VERSION: lifecycleEnv.CHAIN_PROFILE_VERSION,
  CHAINS_CHECK_INTERVAL: lifecycleEnv.CHAINS_CHECK_INTERVAL,
  // Operator migrations through the admin API (POST /api/v1/admin/nodes/{id}/migrate).
  MIGRATION_COOLDOWN: lifecycleEnv.MIGRATION_COOLDOWN,
  ...eventsEnv,
  ...httpEnv,
  ...authEnv,
  ...apiAuthEnv,
  API_SERVER_PORT: portsEnv.API_SERVER_PORT,
  AUTH_SERVER_PORT: portsEnv.AUTH_SERVER_PORT,
  PAYMENT_GRPC_PORT: portsEnv.PAYMENT_GRPC_PORT,
  ...paymentTlsEnv,
  ...paymentClientEnv,
  ...rpcPublicUrlEnv,
  ...hostsEnv,
})
export const authServerEnv = z.object({ ...sharedEnv, ...httpEnv, ...authEnv, ...authServerOnlyEnv, AUTH_SERVER_PORT: portsEnv.AUTH_SERVER_PORT })
export const orchestratorEnv = z.object({
  ...sharedEnv,
  ...eventsEnv,
  SHUTDOWN_TIMEOUT: httpEnv.SHUTDOWN_TIMEOUT,
  ...workflowEnv,
  ...lifecycleEnv,
  ...secretsEnv,
  ARTIFACT_RELEASE_PUBLIC_KEYS: artifactEnv.ARTIFACT_RELEASE_PUBLIC_KEYS,
  /** For the agents the local provider starts; unset: false (docs/artifacts.md, "Agents"). */
  AGENT_REQUIRE_SIGNED_ARTIFACTS: requireSignedArtifactsSetting,
  AGENT_GATEWAY_PORT: portsEnv.AGENT_GATEWAY_PORT,
  // The payment consumer confirms each payment.completed with the payment service (GetPayment).
  PAYMENT_GRPC_PORT: portsEnv.PAYMENT_GRPC_PORT,
  ...paymentTlsEnv,
  ...paymentClientEnv,
  ...paymentConsumerEnv,
  // The `ssh` provider reaches the host fleet.
  ...hostsEnv,
})
export const agentGatewayEnv = z.object({
  ...sharedEnv,
  ...eventsEnv,
  SHUTDOWN_TIMEOUT: httpEnv.SHUTDOWN_TIMEOUT,
  AGENT_GATEWAY_PORT: portsEnv.AGENT_GATEWAY_PORT,
  ...agentGatewayOnlyEnv,
})
export const paymentServiceEnv = z.object({
  ...sharedEnv,
  ...eventsEnv,
  ...httpEnv,
  NODEPLANE_CONFIG_DIR: lifecycleEnv.NODEPLANE_CONFIG_DIR,
  PAYMENT_GRPC_PORT: portsEnv.PAYMENT_GRPC_PORT,
  PAYMENT_HTTP_PORT: portsEnv.PAYMENT_HTTP_PORT,
  PAYMENT_METRICS_PORT: portsEnv.PAYMENT_METRICS_PORT,
  ...paymentTlsEnv,
  ...paymentServiceOnlyEnv,
})
export type PaymentServiceConfig = ResolvedPaths<z.infer<typeof paymentServiceEnv>>
export const rpcGatewayEnv = z.object({
  ...sharedEnv,
  ...httpEnv,
  NODEPLANE_CONFIG_DIR: lifecycleEnv.NODEPLANE_CONFIG_DIR,
  CHAIN_PROFILE_VERSION: lifecycleEnv.CHAIN_PROFILE_VERSION,
  CHAINS_CHECK_INTERVAL: lifecycleEnv.CHAINS_CHECK_INTERVAL,
  LOCAL_HOSTS_DIR: lifecycleEnv.LOCAL_HOSTS_DIR,
  RPC_GATEWAY_PORT: portsEnv.RPC_GATEWAY_PORT,
  // Fleet hosts' SSH, for bitcoin-style chains' RPC cookies kept there (docs/rpc-gateway.md).
  HOSTS_SSH_KEY_DIR: hostsEnv.HOSTS_SSH_KEY_DIR,
  HOSTS_SSH_CONNECT_TIMEOUT: hostsEnv.HOSTS_SSH_CONNECT_TIMEOUT,
  HOSTS_SSH_MAX_SESSIONS: hostsEnv.HOSTS_SSH_MAX_SESSIONS,
  ...rpcGatewayOnlyEnv,
})
export type RpcGatewayConfig = ResolvedPaths<z.infer<typeof rpcGatewayEnv>>

export const upEnv = z.object({
  ...sharedEnv,
  /** A `nodeplane certs nats` directory: each service of `up` connects to NATS_URL as its own user (docs/events.md). */
  NATS_DIR: z.string().min(1).optional(),
  ...artifactEnv,
  AGENT_REQUIRE_SIGNED_ARTIFACTS: requireSignedArtifactsSetting,
  ...eventsEnv,
  ...httpEnv,
  ...portsEnv,
  ...authEnv,
  ...apiAuthEnv,
  ...authServerOnlyEnv,
  ...workflowEnv,
  ...agentGatewayOnlyEnv,
  ...lifecycleEnv,
  ...secretsEnv,
  ...paymentTlsEnv,
  ...paymentServiceOnlyEnv,
  ...paymentClientEnv,
  ...paymentConsumerEnv,
  ...subscriptionLifecycleEnv,
  ...healthEvaluationEnv,
  ...uptimeEnv,
  ...incidentEnv,
  ...rpcGatewayOnlyEnv,
  RPC_PUBLIC_URL: rpcPublicUrlEnv.RPC_PUBLIC_URL,
  ...hostsEnv,
  // On a laptop nothing real can take a payment: unset, the test provider is on while neither the
  // card nor the crypto provider is (src/payments/providers/index.ts, testProviderEnabled).
  PAYMENT_TEST_PROVIDER_ENABLED: z
    .enum(['true', 'false', '1', '0'], { message: 'must be true or false' })
    .optional()
    .transform((v) => (v === undefined ? undefined : v === 'true' || v === '1')),
})

export type DatabaseCommandConfig = ResolvedPaths<z.infer<typeof databaseCommandEnv>>
export type ApiServerConfig = ResolvedPaths<z.infer<typeof apiServerEnv>>
export type UpConfig = ResolvedPaths<z.infer<typeof upEnv>>
export type AuthServerConfig = ResolvedPaths<z.infer<typeof authServerEnv>>

type Shared = z.infer<z.ZodObject<typeof sharedEnv>>
export type ResolvedPaths<T> = Omit<T, 'DATABASE_URL' | 'PAYMENTS_DATABASE_URL'> & {
  NODEPLANE_DATA_DIR: string
  DATABASE_URL: string
  PAYMENTS_DATABASE_URL: string
}

/**
 * Parses `env` with `schema`; throws ConfigError naming every offending variable. The data dir
 * is made absolute, and the database URLs default to SQLite files inside it, so `nodeplane up`
 * and any other command run from the same directory agree on where the data is.
 */
export function loadConfig<S extends z.AnyZodObject>(
  schema: S,
  givenEnv: Env = process.env,
  /** Where values came from when not the environment (`vault:` references), for messages. */
  givenOrigins: Record<string, string> = {},
): ResolvedPaths<z.infer<S>> {
  // `<NAME>_FILE` of every secret setting (docs/configuration.md, "Secrets").
  const files = applySecretFiles(givenEnv)
  const env = files.env
  const origins = { ...givenOrigins, ...files.origins }
  const result = schema.safeParse(env)
  if (files.problems.length > 0 || !result.success) {
    const problems = (result.success ? [] : result.error.issues).map((issue) => {
      const variable = issue.path.join('.')
      const got = env[variable]
      const origin = origins[variable]
      // A value from a file or Vault is a secret by definition: name its source, never echo it.
      if (origin !== undefined) return `${variable} (from ${origin}): ${issue.message}`
      return got === undefined ? `${variable}: ${issue.message}` : `${variable}=${JSON.stringify(shorten(variable, got))}: ${issue.message}`
    })
    throw new ConfigError([...files.problems, ...problems])
  }
  const parsed = result.data as z.infer<S> & Shared
  // The node agent's schema has no data dir or databases.
  if (parsed.NODEPLANE_DATA_DIR === undefined) return parsed as ResolvedPaths<z.infer<S>>
  const dataDir = path.resolve(parsed.NODEPLANE_DATA_DIR)
  return {
    ...parsed,
    NODEPLANE_DATA_DIR: dataDir,
    DATABASE_URL: parsed.DATABASE_URL ?? `sqlite://${path.join(dataDir, 'control-plane.db')}`,
    PAYMENTS_DATABASE_URL: parsed.PAYMENTS_DATABASE_URL ?? `sqlite://${path.join(dataDir, 'payments.db')}`,
  } as ResolvedPaths<z.infer<S>>
}

/** Values echoed in error messages are cut short, and URLs lose their credentials. */
function shorten(variable: string, value: string): string {
  if (value.startsWith('vault:')) return value.slice(0, 200)
  if (/(SECRET|_KEY)$/.test(variable) || (isSecretSetting(variable) && !variable.endsWith('_URL'))) return '***'
  if (variable.endsWith('_URL')) return value.replace(/\/\/[^@/]*@/, '//***@').slice(0, 120)
  return value.length > 80 ? `${value.slice(0, 77)}...` : value
}
