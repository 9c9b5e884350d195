/** Errors the engine raises into workflow code, and the control flow it uses internally. */

/** A step used up its attempts; a workflow may catch it (for example to compensate). */
export class StepFailedError extends Error {
  constructor(
    readonly stepKey: string,
    readonly attempts: number,
    readonly lastError: string,
  ) {
    super(`step ${stepKey} failed after ${attempts} attempt(s): ${lastError}`)
    this.name = 'StepFailedError'
  }
}

/**
 * Thrown by a step's function when another attempt cannot succeed (a deadline fixed before the
 * step began has passed): the step fails at once instead of spending its retries and backoff.
 */
export class NonRetryableStepError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'NonRetryableStepError'
  }
}

/** One attempt ran past its start-to-close or heartbeat timeout. */
export class StepTimeoutError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'StepTimeoutError'
  }
}

/**
 * Thrown by the engine to unwind a workflow function that must stop here for now (a timer, a
 * signal wait, a retry backoff) or for good (the lease is lost, the worker is stopping). The
 * executor also records the reason out of band, so a workflow that swallows it does not
 * change what happens.
 */
export class WorkflowInterrupt extends Error {
  constructor(readonly reason: string) {
    super(`workflow interrupted: ${reason}`)
    this.name = 'WorkflowInterrupt'
  }
}

/** Another orchestrator owns the run now (our lease expired and was taken over). */
export class LeaseLostError extends Error {
  constructor(runId: string) {
    super(`lease on workflow run ${runId} was lost`)
    this.name = 'LeaseLostError'
  }
}

export function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message
  return String(err)
}
