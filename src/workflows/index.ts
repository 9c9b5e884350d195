/** The durable workflow engine (docs/workflows.md). */
export { NonRetryableStepError, StepFailedError, StepTimeoutError } from './errors.js'
export { STEP_PRESETS, resolveStepPolicy, retryDelayMs, type RetryPolicy, type StepOptions, type StepPolicy, type StepPresetName } from './policy.js'
export {
  RUN_STATUSES,
  findRunByKey,
  getRun,
  currentSteps,
  listRuns,
  runFromRow,
  runsQuery,
  listSteps,
  sendSignal,
  startWorkflow,
  type ListRunsFilter,
  type RunStatus,
  type SignalTarget,
  type StartOptions,
  type StartResult,
  type StepStatus,
  type WorkflowRun,
  type WorkflowStep,
} from './store.js'
export { createWorkflowRegistry, type Saga, type StepContext, type WorkflowContext, type WorkflowFunction, type WorkflowRegistry } from './types.js'
export { createWorkflowWorker, defaultOwner, type WorkflowWorker, type WorkflowWorkerOptions } from './worker.js'
export { toRunView, toStepView, type WorkflowRunDetail, type WorkflowRunView, type WorkflowStepView } from './views.js'
