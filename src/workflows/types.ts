/** What workflow code sees of the engine. */
import type { StepOptions } from './policy.js'

export interface StepContext {
  /** 1-based attempt number of this execution of the step. */
  attempt: number
  /** Records liveness of a long step (needed under a heartbeat timeout). */
  heartbeat(): void
}

export interface Saga {
  /** Registers how to undo something that just succeeded. */
  add(name: string, undo: () => Promise<unknown>, options?: StepOptions): void
  /** Runs the registered undos as journaled steps, last registered first. */
  compensate(): Promise<void>
}

export interface WorkflowContext {
  readonly runId: string
  readonly workflowName: string
  readonly workflowKey: string
  /**
   * Runs a named step once: its JSON result is journaled, and a replay returns the journaled
   * result without running `fn` again. Steps are keyed by name and occurrence, so a loop may
   * call the same name repeatedly.
   */
  step<T>(name: string, fn: (step: StepContext) => Promise<T>, options?: StepOptions): Promise<T>
  /** Durable timer: the run sleeps (no process holds it) until `date`. */
  sleepUntil(date: Date): Promise<void>
  sleep(ms: number): Promise<void>
  /** The payload of the next signal of that name, or undefined after `timeoutMs`. */
  waitForSignal<T = unknown>(name: string, options?: { timeoutMs?: number }): Promise<T | undefined>
  /** Heartbeat of the step currently executing (same as the StepContext's). */
  heartbeat(): void
  saga(): Saga
  /** The engine's clock at this point of the replay (journaled, so deterministic). */
  now(): Promise<Date>
}

export type WorkflowFunction<I = unknown, O = unknown> = (ctx: WorkflowContext, input: I) => Promise<O>

export interface WorkflowRegistry {
  register<I, O>(name: string, fn: WorkflowFunction<I, O>): WorkflowRegistry
  get(name: string): WorkflowFunction | undefined
  names(): string[]
}

export function createWorkflowRegistry(): WorkflowRegistry {
  const workflows = new Map<string, WorkflowFunction>()
  const registry: WorkflowRegistry = {
    register(name, fn) {
      if (workflows.has(name)) throw new Error(`workflow ${name} is registered twice`)
      workflows.set(name, fn as WorkflowFunction)
      return registry
    },
    get: (name) => workflows.get(name),
    names: () => [...workflows.keys()],
  }
  return registry
}
