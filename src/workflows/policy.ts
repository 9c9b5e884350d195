/**
 * Step timeouts and retry policies. The presets are the spec's activity classes
 * (shared/spec/000, Limits: "Activity timeouts and retries").
 */

export interface RetryPolicy {
  /** Attempts in all, the first included. */
  maxAttempts: number
  /** Wait before the second attempt. */
  initialIntervalMs: number
  /** Each further wait is the previous one times this. */
  backoffCoefficient: number
  maximumIntervalMs: number
}

export interface StepPolicy {
  /** Start-to-close timeout of one attempt. */
  timeoutMs: number
  /** When set, an attempt that has not called `heartbeat()` for this long is failed. */
  heartbeatTimeoutMs?: number
  retry: RetryPolicy
}

export interface StepOptions {
  timeoutMs?: number
  heartbeatTimeoutMs?: number
  retry?: Partial<RetryPolicy>
  /** Start from a named preset, then apply the fields above. */
  preset?: StepPresetName
}

const backoff = { initialIntervalMs: 1_000, backoffCoefficient: 2, maximumIntervalMs: 60_000 }

export const STEP_PRESETS = {
  default: { timeoutMs: 10 * 60_000, retry: { maxAttempts: 3, ...backoff } },
  infrastructure: { timeoutMs: 15 * 60_000, retry: { maxAttempts: 3, ...backoff } },
  agentWait: { timeoutMs: 5 * 60_000, retry: { maxAttempts: 20, ...backoff } },
  upgrade: { timeoutMs: 10 * 60_000, heartbeatTimeoutMs: 30_000, retry: { maxAttempts: 3, ...backoff } },
} as const satisfies Record<string, StepPolicy>

export type StepPresetName = keyof typeof STEP_PRESETS

export function resolveStepPolicy(options: StepOptions = {}): StepPolicy {
  const base: StepPolicy = STEP_PRESETS[options.preset ?? 'default']
  const heartbeatTimeoutMs = options.heartbeatTimeoutMs ?? base.heartbeatTimeoutMs
  return {
    timeoutMs: options.timeoutMs ?? base.timeoutMs,
    ...(heartbeatTimeoutMs !== undefined ? { heartbeatTimeoutMs } : {}),
    retry: { ...base.retry, ...options.retry },
  }
}

/** Wait after failed attempt number `attempt` (1-based) before the next one. */
export function retryDelayMs(policy: RetryPolicy, attempt: number): number {
  const delay = policy.initialIntervalMs * policy.backoffCoefficient ** Math.max(0, attempt - 1)
  return Math.min(policy.maximumIntervalMs, delay)
}
