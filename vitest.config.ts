import { defineConfig } from 'vitest/config'
import DurationSequencer from './test/helpers/duration-sequencer.js'

/**
 * Files that spend most of their time waiting on real agents, chain processes and workflow timers
 * (measured: a few CPU seconds per minute of wall time). They run in a second pool beside the
 * CPU-bound files, so their waits overlap the others' work instead of holding one of the two
 * process slots (docs/development.md, "Test run time").
 */
export const WAITING_FILES = [
  'test/integration/rollouts/groups.sqlite.test.ts',
  'test/integration/rollouts/groups.postgres.test.ts',
  'test/integration/rollouts/signals.sqlite.test.ts',
  'test/integration/rollouts/signals.postgres.test.ts',
  'test/integration/rollouts/rolling.sqlite.test.ts',
  'test/integration/rollouts/rolling.postgres.test.ts',
  'test/integration/rollouts/config-changes.test.ts',
  'test/integration/rollouts/failed-rollback.test.ts',
  'test/integration/rollouts/group-source-version.test.ts',
  'test/integration/health/heartbeat-evaluation.test.ts',
  'test/integration/incidents/resolution.test.ts',
  'test/integration/workflows/crash.test.ts',
  // Real chains and `nodeplane up` stacks that mostly wait for blocks, health waits and rollout
  // batches: 0.24-0.37 CPU seconds per wall second in a full run (the forks pool's CPU figures).
  'test/e2e/rollout-commands.test.ts',
  'test/e2e/anvil-journey.test.ts',
  'test/e2e/anvil-journey-postgres.test.ts',
  'test/e2e/litecoin-journey.test.ts',
  'test/e2e/litecoin-journey-postgres.test.ts',
  'test/integration/payments/card-provider.test.ts',
  // In the run that added them to the suite (forks pool, two cores shared): 0.24-0.43 CPU seconds
  // per wall second, while this pool sat idle for the last 60% of the run.
  'test/e2e/rollout-commands-postgres.test.ts',
  'test/e2e/operator-remote-commands.test.ts',
  'test/e2e/up-down.test.ts',
  'test/e2e/up-secure-nats.test.ts',
  'test/e2e/daemon-readiness.test.ts',
  // A full run on a faster machine (2026-11-27, 776 s): this pool's files took 387 s a thread, the
  // forks pool's 615 s a slot. These wait on orchestrators, agents, chains and servers at 0.19-0.33
  // CPU seconds per wall second and change no process-wide state.
  'test/e2e/orchestrator-crash-rollout.test.ts',
  'test/e2e/orchestrator-crash-provision.test.ts',
  'test/e2e/anvil-journey-readme.test.ts',
  'test/e2e/up-node-lifecycle.test.ts',
  'test/integration/node-agent/upgrade.test.ts',
  'test/integration/auth/api-keys.test.ts',
  'test/integration/subscriptions/payments-api.test.ts',
  'test/integration/hosts/drain-wait.test.ts',
]

/**
 * The fleet journeys (three network-namespace hosts, a gateway in the test's own process that
 * agents must hear from within the fence timeout): under the rest of the suite's load that process
 * stalled for longer than the fence, agents stopped their chains and migrations failed. They run
 * after everything else, the two side by side (about 12 CPU seconds each over 70 s: they wait on
 * agents and chains), on a machine that is otherwise idle.
 */
export const AFTER_THE_REST_FILES = ['test/integration/hosts/fleet-journey.sqlite.test.ts', 'test/integration/hosts/fleet-journey.postgres.test.ts']

export default defineConfig({
  test: {
    globalSetup: ['test/helpers/global-setup.ts'],
    setupFiles: ['test/helpers/file-setup.ts'],
    reporters: ['default', './test/helpers/slowest-files-reporter.ts'],
    sequence: { sequencer: DurationSequencer },
    testTimeout: 30_000,
    hookTimeout: 60_000,
    teardownTimeout: 30_000,
    poolOptions: {
      // Two cores, and the process-bound files (split stacks, `nodeplane up`, fleets of agents)
      // keep them busy too: two files at a time. Running more at once was measured slower, with
      // timeouts (docs/development.md).
      // A forks worker runs file after file without a fresh process or module graph (isolate:
      // false; a project's own poolOptions are not applied): starting a worker and importing the
      // sources again cost one to two CPU seconds per file. Per-file state lives in hooks, never
      // at a helper module's top level (test/helpers/file-setup.ts, temp-dirs.ts).
      forks: { maxForks: 2, minForks: 1, isolate: false },
      threads: { maxThreads: 2, minThreads: 1 },
    },
    projects: [
      { extends: true, test: { name: 'main', include: ['test/**/*.test.ts'], exclude: [...WAITING_FILES, ...AFTER_THE_REST_FILES], pool: 'forks' } },
      { extends: true, test: { name: 'waiting', include: WAITING_FILES, pool: 'threads' } },
      {
        extends: true,
        test: { name: 'last', include: AFTER_THE_REST_FILES, pool: 'forks', sequence: { groupOrder: 1 } },
      },
    ],
  },
})
