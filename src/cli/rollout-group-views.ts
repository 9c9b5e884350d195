/** Human output of the rollout-group commands (the `--json` output is the API's JSON). */
import { checkGroupSignal, judgeGroupSignal } from '../rollouts/signal-rules.js'
import type { RolloutGroupStatusView, RolloutGroupView, SignalledGroupView } from '../rollouts/views.js'
import { NotFoundError } from '../errors.js'
import type { ApiClient } from './api-client.js'
import { renderTable } from './display.js'
import { moment, took } from './human-time.js'
import { confirmDestructive } from './prompt.js'
import { alreadyNote } from './repeats.js'

export const GROUP_ACTIONS = ['start', 'pause', 'resume', 'cancel', 'skip'] as const
export type GroupAction = (typeof GROUP_ACTIONS)[number]

type Components = RolloutGroupStatusView['components']

export function renderComponents(components: Components): string {
  return renderTable(components, [
    { header: '#', value: (c) => String(c.component_index) },
    { header: 'binary', value: (c) => c.binary_name },
    { header: 'version', value: (c) => c.version },
    { header: 'upgrade', value: (c) => c.upgrade_id ?? '(release)' },
    { header: 'status', value: (c) => c.status },
    { header: 'progress', value: (c) => (c.status === 'not_started' ? '-' : `${c.succeeded_nodes}/${c.total_nodes} succeeded, ${c.failed_nodes} failed`) },
    { header: 'rollout', value: (c) => c.rollout_id ?? '-' },
  ])
}

/** The commands an operator can run now for the group. */
export function groupNextActions(g: Pick<RolloutGroupView, 'id' | 'status'>): string[] {
  const id = `--id ${g.id}`
  switch (g.status) {
    case 'pending':
      return [`nodeplane rollout-group start ${id}`, `nodeplane rollout-group cancel ${id}`]
    case 'running':
      return [`nodeplane rollout-group pause ${id}`, `nodeplane rollout-group skip ${id}`, `nodeplane rollout-group cancel ${id}`]
    case 'paused':
      return [`nodeplane rollout-group resume ${id}`, `nodeplane rollout-group skip ${id}`, `nodeplane rollout-group cancel ${id}`]
    default:
      return []
  }
}

export function describeGroup(g: RolloutGroupView | RolloutGroupStatusView): string {
  const line = (label: string, value: string) => `  ${`${label}:`.padEnd(15)}${value}`
  const paused = g.status === 'paused' && g.pause_reason ? ` (${g.pause_reason})` : ''
  const current = g.current_component_index !== null && g.status !== 'pending' ? `, component ${g.current_component_index + 1}/${g.component_order.length}` : ''
  const lines = [
    `rollout group ${g.id}`,
    line('status', `${g.status}${paused}${current}${g.error_message ? `: ${g.error_message}` : ''}`),
    line('chain', `${g.chain_profile_id}, node type ${g.node_type}`),
    line('policy', `on a failed component: ${g.failure_policy}`),
    line('strategy', `${g.strategy}, batch size ${g.batch_size}${g.canary_size !== null ? `, canary ${g.canary_size}` : ''}, failure threshold ${g.failure_threshold}, health wait ${g.health_wait_duration}`),
    line('created', `${moment(g.created_at)}${g.reason ? `: ${g.reason}` : ''}`),
  ]
  if (g.started_at) lines.push(line('started', moment(g.started_at)))
  if (g.completed_at) lines.push(line('finished', `${moment(g.completed_at)}, took ${took(g.started_at, g.completed_at)}`))
  lines.push('')
  if ('components' in g) lines.push(renderComponents(g.components))
  else lines.push(...g.component_order.map((c, i) => `  ${i}. ${c.binary_name} ${c.version} (${c.upgrade_id ? `manifest ${c.upgrade_id}` : 'release'}, ${c.migration_type})`))
  const actions = groupNextActions(g)
  if (actions.length > 0) lines.push('', '  next:', ...actions.map((a) => `    ${a}`))
  return lines.join('\n')
}

export function groupNotFound(id: string): (err: unknown) => never {
  return (err) => {
    if (err instanceof NotFoundError) throw new NotFoundError(`no rollout group ${id}`, 'its id is in the output of `nodeplane rollout-group create`, and in `nodeplane rollout list` as group_id')
    throw err
  }
}

/** What the action did, or, for a repeat, that nothing changed (docs/cli.md, "Repeats"). */
export function describeGroupAction(action: GroupAction, g: SignalledGroupView): string {
  if (!g.changed) {
    const verdict = judgeGroupSignal(g, action)
    return alreadyNote(`Rollout group ${g.id}`, verdict.kind === 'repeat' ? verdict.already : g.status)
  }
  const effect: Record<GroupAction, string> = {
    start: 'started: its components upgrade one after another',
    pause: 'will pause (with its current component rollout)',
    resume: 'resumes',
    cancel: 'is being cancelled: no further components',
    skip: 'skips its current component and goes on with the next',
  }
  return `Rollout group ${g.id} ${effect[action]}. Follow it with \`nodeplane rollout-group status --id ${g.id}\`.`
}

const CONSEQUENCES: Partial<Record<GroupAction, string>> = {
  cancel: 'No further component will be upgraded',
  skip: 'The current component is left as it is and the next one starts',
}

export async function runGroupAction(api: ApiClient, action: GroupAction, id: string, yes: boolean): Promise<SignalledGroupView> {
  const path = `/rollout-groups/${encodeURIComponent(id)}`
  const consequence = CONSEQUENCES[action]
  if (consequence !== undefined) {
    await confirmDestructive(yes, async () => {
      const g = await api.get<RolloutGroupStatusView>(`${path}/status`).catch(groupNotFound(id))
      // Refused before anyone is asked (exit 4, the API's words); a repeat, or a group that has
      // not started (nothing to lose), is not asked about.
      if (checkGroupSignal(g, action).kind === 'repeat' || g.status === 'pending') return undefined
      const current = g.current_component_index !== null ? g.components[g.current_component_index] : undefined
      const what = `${g.chain_profile_id}/${g.node_type}, ${g.status}${current ? `, component ${current.binary_name} ${current.version} ${current.status}` : ''}`
      return { action: `${action === 'cancel' ? 'cancel' : 'skip the current component of'} rollout group ${g.id} (${what})`, consequence }
    })
  }
  return api.post<SignalledGroupView>(`${path}/${action}`, {}).catch(groupNotFound(id))
}
