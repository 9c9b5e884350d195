import path from 'node:path'
import { z } from 'zod'

/**
 * The command vocabulary shared by the control plane (which stores commands) and the node agent
 * (which executes them). Payloads travel as JSON in `Command.payload_json` (proto/agent.proto) and
 * are validated on both sides with these schemas.
 */
export const COMMAND_TYPES = [
  'configure',
  'start',
  'stop',
  'restart',
  'inject_keys',
  'capture_keys',
  'backup',
  'restore',
  'upgrade',
] as const
export type CommandType = (typeof COMMAND_TYPES)[number]

export const SYNC_STATUSES_REPORTED = ['syncing', 'synced', 'stalled', 'unknown'] as const
/**
 * `starting`: the process runs but has not yet answered its probe since it started, within the
 * probe's start-up grace (docs/health.md: its application health is not judged yet).
 */
export const PROCESS_STATES = ['starting', 'running', 'stopped', 'crash_loop', 'unconfigured'] as const
export type ProcessState = (typeof PROCESS_STATES)[number]

/** Spec: the agent marks a stall after 5 no-progress checks; the orchestrator fails at 20. */
export const AGENT_STALL_MARK = 5
export const ORCHESTRATOR_STALL_LIMIT = 20

/** The chain's own directories in the state directory: where a chain-generated key may live. */
export const CHAIN_WRITABLE_DIRS = ['data', 'config'] as const

/** A relative path inside one of CHAIN_WRITABLE_DIRS (not the directory itself). */
export function isChainWritablePath(p: string): boolean {
  const parts = p.split(/[\\/]/).filter((part) => part !== '' && part !== '.')
  return parts.length >= 2 && (CHAIN_WRITABLE_DIRS as readonly string[]).includes(parts[0] as string)
}

/** A path inside the node's directory: relative, no `..`, no NUL. */
export const relativePath = z
  .string()
  .min(1)
  .max(255)
  .refine(
    (p) => !path.isAbsolute(p) && !p.includes('\0') && !p.split(/[\\/]/).includes('..'),
    'must be a relative path inside the node directory',
  )

export const sha256Hex = z.string().regex(/^[0-9a-f]{64}$/, 'must be a lowercase hex SHA-256')

export const artifactSpec = z.object({
  version: z.string().min(1).max(64),
  /** `file://` or `http(s)://` */
  url: z.string().url().max(2048),
  sha256: sha256Hex,
  /** base64 Ed25519 release signature of a stored artifact (docs/artifacts.md); agents with release keys verify it. */
  signature: z.string().max(128).optional(),
})
export type ArtifactSpec = z.infer<typeof artifactSpec>

export const configFile = z.object({
  path: relativePath,
  content: z.string().max(1_000_000),
  mode: z.number().int().min(0).max(0o777).optional(),
})
export type ConfigFile = z.infer<typeof configFile>

/**
 * How the chain process is started. `runtime: node` runs the installed artifact with the agent's
 * own Node.js (for JavaScript chain programs such as `devnet-node`); `native` executes it.
 * Arguments and environment values may use `{data_dir}`, `{config_dir}` and `{keys_dir}`.
 */
export const runSpec = z.object({
  runtime: z.enum(['native', 'node']).default('native'),
  args: z.array(z.string().max(4096)).max(256).default([]),
  env: z.record(z.string().max(4096)).default({}),
})
export type RunSpec = z.infer<typeof runSpec>

const probeTiming = {
  timeout_ms: z.number().int().min(100).max(60_000).default(5_000),
  /** How long a freshly started process may go without answering before it is judged. */
  startup_grace_ms: z.number().int().min(0).max(3_600_000).default(60_000),
}

/**
 * When a Bitcoin-style node counts as `synced` (docs/chains.md, "bitcoin_rpc"). The defaults suit
 * a node on a public network; an offline regtest node ignores initial block download (a regtest
 * chain is in it until its first block is mined) and needs no peers.
 */
export const bitcoinSyncPolicy = z
  .object({
    /** Blocks the node may be behind its best header chain and still be synced. */
    max_header_lag: z.number().int().min(0).max(1_000_000).default(1),
    /** `syncing`: a node in initial block download is syncing; `ignore`: the flag is not judged. */
    initial_block_download: z.enum(['syncing', 'ignore']).default('syncing'),
    /** Fewer connections than this: the node cannot know the network's head, so it is not synced. */
    min_connections: z.number().int().min(0).max(10_000).default(1),
  })
  .strict()
export type BitcoinSyncPolicy = z.infer<typeof bitcoinSyncPolicy>

export const probeSpec = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('ethereum_jsonrpc'),
    url: z.string().url(),
    ...probeTiming,
  }),
  z.object({
    /** Exit 0 = healthy; stdout may be JSON `{sync_status?, metrics?}`. */
    type: z.literal('command'),
    command: z.array(z.string().max(4096)).min(1).max(64),
    ...probeTiming,
  }),
  z.object({
    /** Bitcoin Core's JSON-RPC 1.0 (Litecoin Core and other forks): getblockchaininfo and getnetworkinfo. */
    type: z.literal('bitcoin_rpc'),
    url: z.string().url(),
    /** The `.cookie` file the node writes, relative to the state directory (e.g. data/regtest/.cookie); absent: credentials in the URL. */
    cookie_file: relativePath.optional(),
    sync_policy: bitcoinSyncPolicy.default({}),
    ...probeTiming,
  }),
])
export type ProbeSpec = z.infer<typeof probeSpec>

export const crashLoopSpec = z.object({
  /** Restarts within the window that make a crash loop (the supervisor then stops restarting). */
  max_restarts: z.number().int().min(1).max(100).default(5),
  window_seconds: z.number().int().min(1).max(86_400).default(300),
})

export const sealedBox = z.object({
  ephemeral_public_key: z.string().min(1).max(64),
  nonce: z.string().min(1).max(64),
  ciphertext: z.string().min(1).max(1_000_000),
})

const fileUrl = z
  .string()
  .url()
  .refine((u) => u.startsWith('file://'), 'only file:// stores are supported')

/**
 * A key the chain holds only inside itself (a wallet), exported through its RPC to a file the
 * capture then reads. `bitcoin_wallet_hd_seed`: the HD seed (WIF) of wallet `wallet`, which the
 * node creates if it has no wallet of that name, reached through the node's `bitcoin_rpc` probe.
 */
export const keyExport = z
  .object({
    type: z.literal('bitcoin_wallet_hd_seed'),
    path: relativePath.refine(isChainWritablePath, `must be a file under ${CHAIN_WRITABLE_DIRS.join('/ or ')}/`),
    wallet: z.string().regex(/^[A-Za-z0-9._-]{1,64}$/, 'must be 1 to 64 letters, digits, ".", "_" or "-"'),
  })
  .strict()
export type KeyExport = z.infer<typeof keyExport>

export const commandPayloads = {
  configure: z.object({
    binary_name: z.string().min(1).max(100).regex(/^[A-Za-z0-9._-]+$/),
    artifact: artifactSpec,
    files: z.array(configFile).max(100).default([]),
    config_version: z.string().max(64).optional(),
    run: runSpec,
    probe: probeSpec.optional(),
    crash_loop: crashLoopSpec.default({}),
    /** The port the templates were rendered with: a later upgrade renders its config changes with it. */
    rpc_port: z.number().int().min(1).max(65_535).optional(),
  }),
  start: z.object({}).strict(),
  stop: z.object({}).strict(),
  restart: z.object({}).strict(),
  inject_keys: z.object({
    keys: z
      .array(
        z
          .object({
            path: relativePath,
            sealed: sealedBox,
            /** `keys` (default): `path` is under `keys/`; `state`: a chain-generated key put back where the chain wrote it (e.g. data/nodekey). */
            location: z.enum(['keys', 'state']).default('keys'),
            /** A state key the chain keeps inside itself (capture_keys.exports): after the next start the agent has the chain take it back (a wallet from its seed) unless it already holds it. */
            restore: keyExport.omit({ path: true }).optional(),
          })
          .refine((k) => k.location === 'keys' || isChainWritablePath(k.path), { path: ['path'], message: `a state key must be under ${CHAIN_WRITABLE_DIRS.join('/ or ')}/` })
          .refine((k) => k.restore === undefined || k.location === 'state', { path: ['restore'], message: 'only a state key is restored into the chain' }),
      )
      .min(1)
      .max(100),
  }),
  capture_keys: z.object({
    paths: z.array(relativePath).min(1).max(100),
    /** X25519 public key (base64) the captured keys are sealed to. */
    recipient_public_key: z.string().min(1).max(64),
    /** Keys the chain keeps inside itself: the agent has the chain write each to its path first. */
    exports: z.array(keyExport).max(10).optional(),
  }),
  /**
   * `key`: the backup's key (src/secrets/backup-keys.ts), sealed to the agent's X25519 key.
   * `stop_chain`: stop the chain first and leave it stopped (a migration's, of a node leaving this
   * host): the snapshot is the chain's last state, not a live copy of files it is still writing.
   */
  backup: z.object({ backup_id: z.string().regex(/^[A-Za-z0-9._-]{1,100}$/), store_url: fileUrl, key: sealedBox, stop_chain: z.boolean().optional() }),
  restore: z.object({ backup_id: z.string().regex(/^[A-Za-z0-9._-]{1,100}$/), store_url: fileUrl, key: sealedBox }),
  upgrade: z.object({
    /** The binary the artifact is a release of: refused unless it is the one the node runs. */
    binary_name: z.string().min(1).max(100).regex(/^[A-Za-z0-9._-]+$/).optional(),
    artifact: artifactSpec,
    config_files: z.array(configFile).max(100).optional(),
    /** Absent: the node keeps its config_version; null clears it (a rollback to the profile's own configuration). */
    config_version: z.string().max(64).nullable().optional(),
    run: runSpec.optional(),
  }),
} satisfies Record<CommandType, z.ZodTypeAny>

export type CommandPayload<T extends CommandType> = z.infer<(typeof commandPayloads)[T]>

export const UPGRADE_ACTIONS = [
  'BackupCurrentState',
  'AcquireArtifact',
  'VerifyArtifact',
  'StopNode',
  'InstallArtifact',
  'WriteConfigs',
  'ReloadDaemon',
  'StartNode',
] as const
export type UpgradeAction = (typeof UPGRADE_ACTIONS)[number]

/** The spec's upgrade phases (rollout node `upgrade_phase`). */
export const UPGRADE_PHASES = [
  'preparing',
  'stopped',
  'mutating',
  'starting',
  'verifying',
  'completed',
  'rollbacking',
  'rolled_back',
  'failed_rollback',
] as const
export type UpgradePhase = (typeof UPGRADE_PHASES)[number]

/** Which phase an action runs in (spec: preparing = backup, acquisition, verification…). */
export const PHASE_OF_ACTION: Record<UpgradeAction, UpgradePhase> = {
  BackupCurrentState: 'preparing',
  AcquireArtifact: 'preparing',
  VerifyArtifact: 'preparing',
  StopNode: 'stopped',
  InstallArtifact: 'mutating',
  WriteConfigs: 'mutating',
  ReloadDaemon: 'mutating',
  StartNode: 'starting',
}

export const upgradeResult = z.object({
  version: z.string(),
  previous_version: z.string().nullable(),
  /** The final phase: `starting` done means the agent's part is over; `verifying` is the control plane's. */
  phase: z.enum(UPGRADE_PHASES),
  actions_done: z.array(z.enum(UPGRADE_ACTIONS)),
  actions_skipped: z.array(z.enum(UPGRADE_ACTIONS)),
  compensated: z.array(z.enum(UPGRADE_ACTIONS)),
  compensation_error: z.string().optional(),
})
export type UpgradeResult = z.infer<typeof upgradeResult>

export function parseCommandPayload<T extends CommandType>(type: T, payload: unknown): CommandPayload<T> {
  return commandPayloads[type].parse(payload) as CommandPayload<T>
}

export function isCommandType(value: string): value is CommandType {
  return (COMMAND_TYPES as readonly string[]).includes(value)
}

/**
 * How often a gateway checks the tokens of its open streams again (fencing): a stream whose token
 * was replaced by a migration or revoked is closed with UNAUTHENTICATED within this, so its agent
 * learns it was superseded and its heartbeats stop being acknowledged. The migrate workflow counts
 * on it for an old agent still connected when its token was replaced.
 */
export const STREAM_TOKEN_RECHECK_MS = 5_000
