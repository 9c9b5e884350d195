/**
 * The chain catalogue a process works with, chosen by `CHAIN_PROFILE_VERSION` (spec; docs/chains.md,
 * "Catalogue versions"): `latest` is the config dir's `chains/`, re-read every
 * `CHAINS_CHECK_INTERVAL`; a pinned tag is `chain-catalogue/<tag>/` and never changes.
 *
 * Everything that needs a profile asks `current()` at the moment of use and keeps no catalogue of
 * its own, so a provisioning step after a change sees the new profiles.
 */
import { ConfigError } from '../errors.js'
import type { Logger } from '../log.js'
import { defaultConfigDir, LATEST_CATALOGUE, latestCatalogueVersion, loadChainCatalogue, type ChainCatalogue } from './chains.js'

/** What users of the catalogue depend on: the catalogue as it is now. */
export interface ChainSource {
  current(): ChainCatalogue
}

export interface ChainCatalogueSource extends ChainSource {
  /** The version of the catalogue `current()` returns now (a tag, or `sha256:…` for latest). */
  readonly version: string
  /** Checks for a new version now; resolves true when the catalogue was swapped. Never rejects. */
  reload(): Promise<boolean>
  /** Stops polling. */
  close(): void
}

export interface OpenChainCatalogueOptions {
  configDir: string
  /** `latest` or a pinned tag (CHAIN_PROFILE_VERSION). */
  version: string
  /** How often `latest` is checked (CHAINS_CHECK_INTERVAL); 0 = only when `reload()` is called. */
  checkIntervalMs: number
  logger: Logger
}

/** A release whose system package is missing loads as unavailable: say so once per load, with what to install. */
function warnUnavailable(log: Logger, catalogue: ChainCatalogue): void {
  for (const profile of catalogue.profiles.values()) {
    for (const release of profile.releases) {
      if (release.unavailable) log.warn({ chain: profile.id, version: release.version }, `chain ${profile.id} release ${release.version} is unavailable: ${release.unavailable}`)
    }
  }
}

/** Loads the catalogue once (a ConfigError stops start-up) and, for `latest`, keeps it current. */
export async function openChainCatalogue(options: OpenChainCatalogueOptions): Promise<ChainCatalogueSource> {
  const log = options.logger.child({ component: 'chain-catalogue' })
  // The one reference every reader goes through: a fully loaded and validated catalogue replaces
  // it in a single assignment, so no request ever sees part of one version and part of another.
  let catalogue = await loadChainCatalogue(options.configDir, options.version)
  log.info({ version: catalogue.version, chains: [...catalogue.profiles.keys()] }, 'chain catalogue loaded')
  warnUnavailable(log, catalogue)
  if (options.version !== LATEST_CATALOGUE) return pinned(catalogue)

  let rejected: string | undefined
  let inFlight: Promise<boolean> | undefined

  const check = async (): Promise<boolean> => {
    const seen = await latestCatalogueVersion(options.configDir)
    // The same broken content is reported once, not on every check.
    if (seen === catalogue.version || seen === rejected) return false
    let next: ChainCatalogue
    try {
      next = await loadChainCatalogue(options.configDir, LATEST_CATALOGUE)
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err
      rejected = seen
      log.warn({ version: seen, kept: catalogue.version, problems: err.problems }, `new chain catalogue rejected, keeping ${catalogue.version}: ${err.problems.join('; ')}`)
      return false
    }
    if (next.version === catalogue.version) return false
    const previous = catalogue.version
    catalogue = next
    rejected = undefined
    log.info({ version: next.version, previous, chains: [...next.profiles.keys()] }, 'chain catalogue changed')
    warnUnavailable(log, next)
    return true
  }

  const reload = (): Promise<boolean> => {
    // Overlapping checks (a slow disk, a test calling reload while the timer fires) share one.
    inFlight ??= check()
      .catch((err: unknown) => {
        log.warn({ err, kept: catalogue.version }, `cannot check the chain catalogue, keeping ${catalogue.version}: ${(err as Error).message}`)
        return false
      })
      .finally(() => {
        inFlight = undefined
      })
    return inFlight
  }

  const timer = options.checkIntervalMs > 0 ? setInterval(() => void reload(), options.checkIntervalMs) : undefined
  timer?.unref()
  return {
    current: () => catalogue,
    get version() {
      return catalogue.version
    },
    reload,
    close: () => clearInterval(timer),
  }
}

/** The catalogue settings of the processes that load it (api-server, orchestrator, up). */
export interface ChainCatalogueSettings {
  NODEPLANE_CONFIG_DIR?: string | undefined
  CHAIN_PROFILE_VERSION: string
  CHAINS_CHECK_INTERVAL: number
}

export function openChainCatalogueFromSettings(settings: ChainCatalogueSettings, logger: Logger): Promise<ChainCatalogueSource> {
  return openChainCatalogue({
    configDir: settings.NODEPLANE_CONFIG_DIR ?? defaultConfigDir(),
    version: settings.CHAIN_PROFILE_VERSION,
    checkIntervalMs: settings.CHAINS_CHECK_INTERVAL,
    logger,
  })
}

/** A source that always answers `catalogue`: pinned versions, and tests. */
export function staticChainSource(catalogue: ChainCatalogue): ChainCatalogueSource {
  return pinned(catalogue)
}

function pinned(catalogue: ChainCatalogue): ChainCatalogueSource {
  return { current: () => catalogue, version: catalogue.version, reload: () => Promise.resolve(false), close: () => undefined }
}
