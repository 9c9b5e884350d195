import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { PassThrough } from 'node:stream'
import { describe, expect, it } from 'vitest'
import { artifactFromFlags, artifactPath, groupRequest, parseComponent, rolloutRequest } from '../../../src/cli/rollout-create.js'
import { startLiveView } from '../../../src/cli/rollout-live.js'
import { EXIT_WAITING_FOR_OPERATOR, nextActions, outcomeExitCode, rolloutOutcome } from '../../../src/cli/rollout-views.js'
import { changeLines, finalLines, watchIsOver, type RolloutSnapshot } from '../../../src/cli/rollout-watch.js'
import { ROLLOUT_STATUSES, type RolloutStatus } from '../../../src/rollouts/states.js'
import type { RolloutDetailView, RolloutNodeView } from '../../../src/rollouts/views.js'

const ID = '01a20fa6-628f-7e90-9611-ba52a4fb85f3'
const NODE_A = '72fd5242-c7f2-428c-a15e-b7622b6d43f4'
const NODE_B = '68ece61f-f471-4ccf-8d14-de0bbd993ef9'

function rollout(fields: Partial<RolloutDetailView> = {}): RolloutDetailView {
  return {
    id: ID,
    group_id: null,
    component_index: null,
    upgrade_id: 'devnet-1.1.0',
    chain_profile_id: 'devnet',
    node_type: 'full',
    binary_name: 'devnet-node',
    source_version: '1.0.0',
    target_version: '1.1.0',
    target_binary_url: 'file:///x',
    target_binary_checksum: `sha256:${'a'.repeat(64)}`,
    strategy: 'rolling',
    status: 'running',
    batch_size: 10,
    canary_size: null,
    failure_threshold: 0.2,
    health_wait_duration: '2s',
    health_wait_duration_ms: 2000,
    total_nodes: 2,
    succeeded_nodes: 0,
    failed_nodes: 0,
    manifest_content_hash: null,
    migration_type: 'non_breaking',
    recovery_plan: null,
    config_changes: null,
    compatible_source_versions: null,
    created_by: 'u',
    reason: null,
    pause_reason: null,
    awaiting: null,
    current_batch: 0,
    batch_count: 1,
    forced: false,
    error_message: null,
    scheduled_at: null,
    started_at: null,
    completed_at: null,
    version: 3,
    created_at: '2026-11-24T22:00:00.000Z',
    updated_at: '2026-11-24T22:00:00.000Z',
    node_counts: { pending: 0, in_progress: 0, validating: 0, succeeded: 0, failed: 0, rolled_back: 0, skipped: 0 },
    ...fields,
  }
}

function node(nodeId: string, fields: Partial<RolloutNodeView> = {}): RolloutNodeView {
  return {
    id: `${nodeId}-rn`,
    rollout_id: ID,
    node_id: nodeId,
    batch_index: 0,
    status: 'pending',
    upgrade_phase: null,
    previous_version: null,
    previous_binary_url: null,
    previous_checksum: null,
    error_message: null,
    attempt_count: 0,
    started_at: null,
    completed_at: null,
    created_at: '2026-11-24T22:00:00.000Z',
    updated_at: '2026-11-24T22:00:00.000Z',
    ...fields,
  }
}

describe('the outcome of a watched rollout (exit codes)', () => {
  const expected: Record<RolloutStatus, number> = {
    pending: EXIT_WAITING_FOR_OPERATOR,
    scheduled: 0,
    running: 0,
    paused: EXIT_WAITING_FOR_OPERATOR,
    completed: 0,
    failed: 1,
    cancelled: 1,
    rolled_back: 1,
  }
  it.each(ROLLOUT_STATUSES.map((s) => [s]))('%s', (status) => {
    const r = rollout({ status, pause_reason: status === 'paused' ? 'operator' : null })
    expect(outcomeExitCode(rolloutOutcome(r))).toBe(expected[status])
  })

  it('6 is distinct from every other documented code', () => {
    expect([0, 1, 2, 3, 4, 5, 69, 77, 78]).not.toContain(EXIT_WAITING_FOR_OPERATOR)
  })

  it('a canary waiting for approval waits for an operator; a rollout paused by its own rollback does not', () => {
    expect(rolloutOutcome(rollout({ awaiting: 'approve_canary' }))).toBe('waiting')
    for (const reason of ['operator', 'failure_threshold', 'canary_failed', 'component_failed']) expect(rolloutOutcome(rollout({ status: 'paused', pause_reason: reason }))).toBe('waiting')
    expect(rolloutOutcome(rollout({ status: 'paused', pause_reason: 'rollback' }))).toBe('in_progress')
  })

  it('watching stops at an end or a wait, but not at the wait a signal just sent is ending', () => {
    expect(watchIsOver(rollout())).toBe(false)
    expect(watchIsOver(rollout({ status: 'completed' }))).toBe(true)
    expect(watchIsOver(rollout({ status: 'failed' }), 3)).toBe(true)
    const awaiting = rollout({ awaiting: 'approve_canary', version: 7 })
    expect(watchIsOver(awaiting)).toBe(true)
    expect(watchIsOver(awaiting, 7)).toBe(false)
    expect(watchIsOver({ ...awaiting, version: 8 }, 7)).toBe(true)
  })
})

describe('what the operator can do next', () => {
  it('offers force at the failure threshold, resume otherwise, approve-canary first at the gate, nothing once done', () => {
    expect(nextActions(rollout({ status: 'paused', pause_reason: 'failure_threshold', failed_nodes: 1 }))).toEqual([
      `nodeplane rollout force --id ${ID} --watch`,
      `nodeplane rollout cancel --id ${ID}`,
      `nodeplane rollout rollback --id ${ID}`,
      `nodeplane rollout nodes --id ${ID} --status failed`,
      `nodeplane rollout retry-node --id ${ID} --node NODE_ID`,
    ])
    expect(nextActions(rollout({ status: 'paused', pause_reason: 'operator' }))[0]).toBe(`nodeplane rollout resume --id ${ID} --watch`)
    expect(nextActions(rollout({ awaiting: 'approve_canary' }))[0]).toBe(`nodeplane rollout approve-canary --id ${ID} --watch`)
    expect(nextActions(rollout({ status: 'paused', pause_reason: 'rollback' }))).toEqual([`nodeplane rollout status --id ${ID} --watch`])
    expect(nextActions(rollout({ status: 'completed' }))).toEqual([])
  })

  it('the closing lines say the outcome, and the commands when someone has to act', () => {
    expect(finalLines(rollout({ status: 'completed', succeeded_nodes: 2 }))).toEqual([`Rollout ${ID} completed: 2/2 nodes upgraded to 1.1.0.`])
    expect(finalLines(rollout({ status: 'paused', pause_reason: 'canary_failed' }))[0]).toBe(`Rollout ${ID} waits for an operator: auto-paused: the canary failed.`)
    expect(finalLines(rollout({ status: 'rolled_back', succeeded_nodes: 0 }))[0]).toBe(`Rollout ${ID} rolled back: 0/2 succeeded, 0 failed.`)
  })
})

describe('one line per change (non-TTY --watch)', () => {
  const at = new Date('2026-11-24T22:21:36.500Z')
  const first: RolloutSnapshot = { rollout: rollout(), nodes: [node(NODE_A), node(NODE_B)] }

  it('the first snapshot shows the rollout and every node; an unchanged one nothing', () => {
    expect(changeLines(undefined, first, at)).toEqual([
      `22:21:36Z rollout ${ID} running, batch 1/1: 0/2 succeeded, 0 failed`,
      `22:21:36Z node ${NODE_A} (batch 1) pending`,
      `22:21:36Z node ${NODE_B} (batch 1) pending`,
    ])
    expect(changeLines(first, structuredClone(first), at)).toEqual([])
  })

  it('a phase change is one node line; a counter change one rollout line; a failure carries its error', () => {
    const phase = { ...first, nodes: [node(NODE_A, { status: 'in_progress', upgrade_phase: 'mutating', attempt_count: 1 }), node(NODE_B)] }
    expect(changeLines(first, phase, at)).toEqual([`22:21:36Z node ${NODE_A} (batch 1) in_progress, phase mutating`])
    const failed: RolloutSnapshot = {
      rollout: rollout({ failed_nodes: 1, version: 4 }),
      nodes: [node(NODE_A, { status: 'failed', upgrade_phase: 'rolled_back', attempt_count: 2, error_message: 'checksum mismatch' }), node(NODE_B)],
    }
    expect(changeLines(phase, failed, at)).toEqual([
      `22:21:36Z rollout ${ID} running, batch 1/1: 0/2 succeeded, 1 failed`,
      `22:21:36Z node ${NODE_A} (batch 1) failed, phase rolled_back, attempt 2: checksum mismatch`,
    ])
    // A write that changes nothing an operator sees (version, updated_at) is no line.
    expect(changeLines(failed, { ...failed, rollout: { ...failed.rollout, version: 9, updated_at: '2026-11-24T22:30:00.000Z' } }, at)).toEqual([])
  })
})

describe('the live view (ink)', () => {
  it('shows the batches with each node, the counters, the canary gate and the next commands', async () => {
    const out = Object.assign(new PassThrough(), { columns: 160, rows: 60, isTTY: true }) as unknown as NodeJS.WriteStream
    let written = ''
    ;(out as unknown as PassThrough).on('data', (chunk: Buffer) => (written += chunk.toString()))
    const live = await startLiveView(1000, out)
    live.update({
      rollout: rollout({ strategy: 'canary', migration_type: 'breaking', canary_size: 1, awaiting: 'approve_canary', succeeded_nodes: 1, batch_count: 2 }),
      nodes: [node(NODE_A, { status: 'succeeded', upgrade_phase: 'completed', attempt_count: 1 }), node(NODE_B, { batch_index: 1 })],
    })
    await live.stop()
    const text = written.replace(/\u001b\[[0-9;?]*[A-Za-z]/g, '')
    expect(text).toContain(`Rollout ${ID}`)
    expect(text).toContain('running (awaiting approve_canary)')
    expect(text).toContain('1 succeeded, 0 failed of 2')
    expect(text).toContain('batch 1/2')
    expect(text).toMatch(/batch 1 \(canary\) +1 succeeded/)
    expect(text).toMatch(new RegExp(`${NODE_A} +succeeded +completed`))
    expect(text).toMatch(/batch 2 +1 pending/)
    expect(text).toContain('Canary gate: waiting for your approval')
    expect(text).toContain(`nodeplane rollout approve-canary --id ${ID} --watch`)
  })

  it('after approval: the gate says approved, a validating node its health wait, and NO_COLOR leaves colours out', async () => {
    const out = Object.assign(new PassThrough(), { columns: 160, rows: 60, isTTY: true }) as unknown as NodeJS.WriteStream
    let written = ''
    ;(out as unknown as PassThrough).on('data', (chunk: Buffer) => (written += chunk.toString()))
    const live = await startLiveView(1000, out, false)
    const validatingSince = new Date(Date.now() - 500).toISOString()
    live.update({
      rollout: rollout({ strategy: 'canary', migration_type: 'breaking', canary_size: 1, succeeded_nodes: 1, current_batch: 1, batch_count: 2, health_wait_duration: '5m', health_wait_duration_ms: 300_000 }),
      nodes: [node(NODE_A, { status: 'succeeded', upgrade_phase: 'completed', attempt_count: 1 }), node(NODE_B, { batch_index: 1, status: 'validating', upgrade_phase: 'verifying', updated_at: validatingSince })],
    })
    await live.stop()
    expect(written).not.toMatch(/\u001b\[(3\d|9\d)m/)
    const text = written.replace(/\u001b\[[0-9;?]*[A-Za-z]/g, '')
    expect(text).toContain('batch 2/2')
    expect(text).toContain('Canary gate: approved')
    expect(text).not.toContain('not reached yet')
    expect(text).toMatch(new RegExp(`${NODE_B} +validating +verifying  health wait until \\S+ \\S+Z \\(4m5\\ds left\\)`))
  })
})

describe('request bodies from flags', () => {
  const base = { chain: 'devnet', 'node-type': 'full', 'source-version': '1.0.0' }

  it('auto mode sends the upgrade id and only the flags given; manual mode needs the four binary flags', () => {
    expect(rolloutRequest({ ...base, 'upgrade-id': 'devnet-1.1.0', 'failure-threshold': '0.5', 'health-wait': '2s' })).toEqual({
      chain_profile_id: 'devnet',
      node_type: 'full',
      source_version: '1.0.0',
      upgrade_id: 'devnet-1.1.0',
      failure_threshold: 0.5,
      health_wait_duration: '2s',
    })
    expect(() => rolloutRequest({ ...base, 'target-url': 'file:///x' })).toThrow('manual mode (no --upgrade-id) needs --artifact BINARY@VERSION, or --binary-name, --target-version, --target-checksum')
    expect(() => rolloutRequest({ ...base, 'upgrade-id': 'u', 'failure-threshold': 'lots' })).toThrow(/--failure-threshold must be a fraction/)
  })

  it('--artifact names a stored artifact: binary and version from the flag, the digest the API gave or --target-checksum; malformed or beside the flags it replaces, refused', () => {
    const digest = `sha256:${'ab'.repeat(32)}`
    expect(rolloutRequest({ ...base, artifact: 'devnet-node@1.2.0+build.1' }, digest)).toEqual({
      chain_profile_id: 'devnet',
      node_type: 'full',
      source_version: '1.0.0',
      binary_name: 'devnet-node',
      target_version: '1.2.0+build.1',
      target_binary_checksum: digest,
    })
    expect(rolloutRequest({ ...base, artifact: 'devnet-node@1.2.0', 'target-checksum': `sha256:${'cd'.repeat(32)}` }, digest).target_binary_checksum).toBe(`sha256:${'cd'.repeat(32)}`)
    expect(artifactPath({ binary_name: 'devnet-node', version: '1.2.0+b' })).toBe('/artifacts/devnet-node/1.2.0%2Bb')
    for (const bad of ['devnet-node', '@1.2.0', 'devnet-node@']) {
      expect(() => artifactFromFlags({ ...base, artifact: bad }), bad).toThrow(`--artifact "${bad}" must be BINARY@VERSION`)
    }
    expect(() => artifactFromFlags({ ...base, artifact: 'devnet-node@1.2.0', 'target-url': 'https://x/y', 'binary-name': 'b' })).toThrow(
      '--artifact names the binary and version itself: drop --binary-name, --target-url',
    )
    expect(() => rolloutRequest({ ...base, artifact: 'devnet-node@1.2.0' })).toThrow('no digest for --artifact devnet-node@1.2.0')
  })

  it('a group from a file, with flags replacing its fields and --component its component_order', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rollout-group-'))
    try {
      const file = path.join(dir, 'group.json')
      fs.writeFileSync(file, JSON.stringify({ chain_profile_id: 'devnet', node_type: 'full', failure_policy: 'manual', component_order: [{ binary_name: 'a', node_type: 'full', version: '1' }], batch_size: 5 }))
      expect(groupRequest({ file, 'failure-policy': 'partial_ok', component: ['devnet-node:1.1.0:devnet-1.1.0'] })).toEqual({
        chain_profile_id: 'devnet',
        node_type: 'full',
        failure_policy: 'partial_ok',
        batch_size: 5,
        component_order: [{ binary_name: 'devnet-node', node_type: 'full', version: '1.1.0', upgrade_id: 'devnet-1.1.0' }],
      })
      fs.writeFileSync(file, '[1]')
      expect(() => groupRequest({ file })).toThrow(/must hold one JSON object/)
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
    expect(() => groupRequest({ chain: 'devnet', 'node-type': 'full', component: ['devnet-node:1.1.0'] })).toThrow('a rollout group needs --failure-policy')
    expect(parseComponent('devnet-node:1.1.0', 'archive')).toEqual({ binary_name: 'devnet-node', node_type: 'archive', version: '1.1.0' })
    expect(() => parseComponent('devnet-node:1.1.0:', 'full')).toThrow(/must be BINARY:VERSION/)
  })
})
