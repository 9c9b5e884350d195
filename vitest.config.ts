import { defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/helpers/global-setup.ts'],
    setupFiles: ['test/helpers/cpu-usage-setup.ts'],
    reporters: ['default', './test/helpers/slowest-files-reporter.ts'],
    pool: 'forks',
    // Two cores, and the process-bound files (split stacks, `nodeplane up`, fleets of agents)
    // keep them busy too: two files at a time. Running more at once was measured slower, with
    // timeouts (docs/development.md).
    poolOptions: { forks: { maxForks: 2, minForks: 1 } },
    testTimeout: 30_000,
    hookTimeout: 60_000,
    teardownTimeout: 30_000,
  },
})
