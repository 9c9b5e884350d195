import { defineConfig } from 'vitest/config'

/**
 * Files that spend their time waiting on real processes (the binary, agents, devnet nodes,
 * nats-server, a split stack), not on this machine's CPU. They run in the `processes` project,
 * three at a time, beside the `compute` project's two, so the waits overlap (docs/development.md).
 */
const PROCESS_BOUND = ['test/e2e/**/*.test.ts', 'test/integration/{rollouts,provisioning,agent,agents}/**/*.test.ts']

export default defineConfig({
  test: {
    globalSetup: ['test/helpers/global-setup.ts'],
    reporters: ['default', './test/helpers/slowest-files-reporter.ts'],
    // Two cores: the compute project's files (forks) two at a time, the process-bound files
    // (threads: a second pool, so its own limit) three at a time.
    poolOptions: { forks: { maxForks: 2, minForks: 1 }, threads: { maxThreads: 3, minThreads: 1 } },
    testTimeout: 30_000,
    hookTimeout: 60_000,
    teardownTimeout: 30_000,
    projects: [
      { extends: true, test: { name: 'compute', include: ['test/**/*.test.ts'], exclude: PROCESS_BOUND, pool: 'forks' } },
      { extends: true, test: { name: 'processes', include: PROCESS_BOUND, pool: 'threads' } },
    ],
  },
})
