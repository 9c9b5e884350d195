/** The operator's view of runs and steps: the `--json` contract of `nodeplane workflow list|show`. */
import type { RunStatus, WorkflowRun, WorkflowStep } from './store.js'

export interface WorkflowRunView {
  id: string
  workflow: string
  key: string
  status: RunStatus
  current_step: string | null
  /** Attempts of the current step so far (0 before any step). */
  attempts: number
  error: string | null
  lease_owner: string | null
  lease_expires_at: string | null
  wake_at: string | null
  created_at: string
  updated_at: string
  completed_at: string | null
}

export interface WorkflowStepView {
  step: string
  status: string
  attempt: number
  error: string | null
  started_at: string | null
  finished_at: string | null
  next_attempt_at: string | null
}

export interface WorkflowRunDetail extends WorkflowRunView {
  input: unknown
  result: unknown
  steps: WorkflowStepView[]
}

const iso = (d: Date | null) => (d ? d.toISOString() : null)

export function toRunView(run: WorkflowRun, currentStep?: WorkflowStep | null): WorkflowRunView {
  return {
    id: run.id,
    workflow: run.workflowName,
    key: run.workflowKey,
    status: run.status,
    current_step: run.currentStep,
    attempts: currentStep?.attempt ?? 0,
    // The run's own error when it failed; otherwise the current step's last one (a retry in progress).
    error: run.error ?? currentStep?.error ?? null,
    lease_owner: run.leaseOwner,
    lease_expires_at: iso(run.leaseExpiresAt),
    wake_at: iso(run.wakeAt),
    created_at: run.createdAt.toISOString(),
    updated_at: run.updatedAt.toISOString(),
    completed_at: iso(run.completedAt),
  }
}

export function toStepView(step: WorkflowStep): WorkflowStepView {
  return {
    step: step.stepKey,
    status: step.status,
    attempt: step.attempt,
    error: step.error,
    started_at: iso(step.startedAt),
    finished_at: iso(step.finishedAt),
    next_attempt_at: iso(step.nextAttemptAt),
  }
}
